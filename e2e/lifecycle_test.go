package e2e

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestLifecycleIntegration takes jobs through every scripted token
// (enqueue, claim, extend, complete, fail to delayed and to dead, retry,
// cancel, promote, reap, pause/resume, remove) and the reads stats and
// peek, each branch that answers differently (not active, already done,
// existing row) included.
func TestLifecycleIntegration(t *testing.T) {
	node.EachServer(t, func(t *testing.T, server node.Server) { runBoth(t, server, lifecycle) })
}

// lifecycle is the scenario of TestLifecycleIntegration.
func lifecycle(t testing.TB, tr *Transcript) {
	const q = "orders"
	ctx := testCtx(t)
	var c *legacy.Client
	tr.Step("connect", func() { c = tr.Dial("orders-worker") })

	tr.Step("enqueue six", func() {
		for _, id := range []string{"J1", "J2", "J3", "J4", "J5", "J6"} {
			want(t, true)(c.Enqueue(ctx, q, id, "payload of "+id))
		}
		want(t, false)(c.Enqueue(ctx, q, "J1", "another payload"))
		want(t, [6]int64{6, 0, 0, 0, 0, 0})(c.Stats(ctx, q))
		peeks(t, legacy.Row{State: "pending", Attempts: 0, Payload: "payload of J1"})(c.Peek(ctx, q, "J1"))
	})
	tr.Keys("enqueued")

	tr.Step("claim, extend, complete J1", func() {
		claims(t, legacy.Job{ID: "J1", Payload: "payload of J1", Attempts: 1})(c.Claim(ctx, q, 30000))
		deadline, err := c.Extend(ctx, q, "J1", 60000)
		if err != nil {
			t.Fatal(err)
		}
		score(t, tr, legacy.Key(q, "active"), "J1", deadline) // the reply is the deadline written
		want(t, int64(0))(c.Extend(ctx, q, "J2", 60000))      // J2 is pending, not active
		want(t, true)(c.Complete(ctx, q, "J1"))
		want(t, false)(c.Complete(ctx, q, "J1")) // no longer active
		want(t, int64(0))(c.Extend(ctx, q, "J1", 60000))
	})

	tr.Step("claim J2, fail it to delayed", func() {
		claims(t, legacy.Job{ID: "J2", Payload: "payload of J2", Attempts: 1})(c.Claim(ctx, q, 30000))
		if _, err := c.Fail(ctx, q, "J2", "timeout talking to the exchange", 3, 5000); err != nil {
			t.Fatal(err)
		}
		want(t, int64(-1))(c.Fail(ctx, q, "J2", "again", 3, 5000)) // not active
	})

	tr.Step("claim J3, fail it to dead, retry it", func() {
		claims(t, legacy.Job{ID: "J3", Payload: "payload of J3", Attempts: 1})(c.Claim(ctx, q, 30000))
		want(t, int64(0))(c.Fail(ctx, q, "J3", "malformed order", 1, 0)) // max attempts reached: dead
	})
	tr.Keys("J1 done, J2 delayed, J3 dead")

	tr.Step("retry J3, cancel J4 and J2", func() {
		want(t, true)(c.Retry(ctx, q, "J3"))
		want(t, false)(c.Retry(ctx, q, "J3"))             // not dead any more
		want(t, true)(c.Cancel(ctx, q, "J4"))             // pending
		want(t, false)(c.Cancel(ctx, q, "J4"))            // already cancelled
		want(t, true)(c.Cancel(ctx, q, "J2"))             // delayed
		want(t, false)(c.Enqueue(ctx, q, "J4", "resent")) // a cancelled row exists
		peeks(t, legacy.Row{State: "cancelled", Attempts: 1, Payload: "payload of J2"})(c.Peek(ctx, q, "J2"))
	})
	tr.Keys("J3 retried, J4 and J2 cancelled")

	tr.Step("fail J3 with no backoff, promote it", func() {
		claims(t, legacy.Job{ID: "J3", Payload: "payload of J3", Attempts: 1})(c.Claim(ctx, q, 30000))
		want(t, int64(0))(c.Promote(ctx, q, 10)) // nothing delayed yet
		if _, err := c.Fail(ctx, q, "J3", "retry me", 5, 0); err != nil {
			t.Fatal(err)
		}
		want(t, int64(1))(c.Promote(ctx, q, 10))
		want(t, [6]int64{3, 0, 0, 1, 0, 0})(c.Stats(ctx, q))
	})

	tr.Step("claim J3 with a lease of 0, J5 with a lease of 30000", func() {
		claims(t, legacy.Job{ID: "J3", Payload: "payload of J3", Attempts: 2})(c.Claim(ctx, q, 0))
		claims(t, legacy.Job{ID: "J5", Payload: "payload of J5", Attempts: 1})(c.Claim(ctx, q, 30000))
	})
	tr.WaitPastLastStep()
	tr.Step("reap J3 back to pending", func() {
		want(t, int64(1))(c.Reap(ctx, q, 10, 3)) // J3 only: J5's lease runs
		want(t, int64(0))(c.Reap(ctx, q, 10, 3))
	})
	tr.Step("claim J3 again with a lease of 0", func() {
		claims(t, legacy.Job{ID: "J3", Payload: "payload of J3", Attempts: 3})(c.Claim(ctx, q, 0))
	})
	tr.WaitPastLastStep()
	tr.Step("reap J3 to dead", func() {
		want(t, int64(1))(c.Reap(ctx, q, 10, 3))
		peeks(t, legacy.Row{State: "dead", Attempts: 3, Payload: "payload of J3"})(c.Peek(ctx, q, "J3"))
	})
	tr.Keys("J3 reaped to dead")

	tr.Step("pause", func() {
		want(t, true)(c.Pause(ctx, q))
		want(t, false)(c.Pause(ctx, q))
	})
	tr.Keys("paused")
	tr.Step("claim nothing while paused, resume", func() {
		claimsNothing(t)(c.Claim(ctx, q, 30000))
		want(t, [6]int64{1, 0, 1, 1, 1, 1})(c.Stats(ctx, q))
		want(t, true)(c.Resume(ctx, q))
		want(t, false)(c.Resume(ctx, q))
	})

	tr.Step("remove", func() {
		want(t, true)(c.Remove(ctx, q, "J5"))  // active
		want(t, false)(c.Remove(ctx, q, "J5")) // gone
		want(t, true)(c.Remove(ctx, q, "J1"))  // done
		want(t, true)(c.Remove(ctx, q, "J3"))  // dead
		want(t, true)(c.Remove(ctx, q, "J4"))  // cancelled: only the row
		if _, found, err := c.Peek(ctx, q, "J5"); err != nil || found {
			t.Fatalf("peek of a removed job: found %v, err %v", found, err)
		}
	})

	tr.Step("drain", func() {
		claims(t, legacy.Job{ID: "J6", Payload: "payload of J6", Attempts: 1})(c.Claim(ctx, q, 30000))
		claimsNothing(t)(c.Claim(ctx, q, 30000))
		want(t, [6]int64{0, 0, 1, 0, 0, 0})(c.Stats(ctx, q))
	})
}
