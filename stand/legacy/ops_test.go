package legacy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/valkey-io/valkey-go"
)

// serverMs reads the node's clock in ms.
func serverMs(t *testing.T, vc valkey.Client) int64 {
	t.Helper()
	a, err := vc.Do(testCtx(t), vc.B().Time().Build()).AsStrSlice()
	if err != nil || len(a) != 2 {
		t.Fatalf("TIME: %v %v", a, err)
	}
	var sec, usec int64
	for _, ch := range a[0] {
		sec = sec*10 + int64(ch-'0')
	}
	for _, ch := range a[1] {
		usec = usec*10 + int64(ch-'0')
	}
	return sec*1000 + usec/1000
}

func zscore(t *testing.T, vc valkey.Client, key, member string) (int64, bool) {
	t.Helper()
	f, err := vc.Do(testCtx(t), vc.B().Zscore().Key(key).Member(member).Build()).AsFloat64()
	if valkey.IsValkeyNil(err) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return int64(f), true
}

func hgetall(t *testing.T, vc valkey.Client, key string) map[string]string {
	t.Helper()
	m, err := vc.Do(testCtx(t), vc.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func exists(t *testing.T, vc valkey.Client, key string) bool {
	t.Helper()
	n, err := vc.Do(testCtx(t), vc.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func wantEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// TestSeedTransition runs the seed's enqueue-then-claim of JOB0KHTOWnGLuC on
// quotes with a 30000 ms lease and checks what the node holds after each.
func TestSeedTransition(t *testing.T) { node.EachServer(t, testSeedTransition) }

func testSeedTransition(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	vc := n.Client(t)
	c, rec := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	k := chk{t}
	const q, id, payload = "quotes", "JOB0KHTOWnGLuC", `{"symbol":"EMQ","px":"42.00"}`

	wantEq(t, "enqueue", k.b(c.Enqueue(ctx, q, id, payload)), true)
	row := hgetall(t, vc, "emq:{quotes}:job:JOB0KHTOWnGLuC")
	wantEq(t, "row after enqueue", len(row), 3)
	wantEq(t, "state", row["state"], "pending")
	wantEq(t, "attempts", row["attempts"], "0")
	wantEq(t, "payload", row["payload"], payload)
	score, ok := zscore(t, vc, "emq:{quotes}:pending", id)
	wantEq(t, "pending holds the id", ok, true)
	wantEq(t, "pending score", score, 0)

	before := serverMs(t, vc)
	job, empty, err := c.Claim(ctx, q, 30000)
	after := serverMs(t, vc)
	if err != nil || empty {
		t.Fatalf("claim: %v empty=%v", err, empty)
	}
	wantEq(t, "claimed", job, legacy.Job{ID: id, Payload: payload, Attempts: 1})
	wantEq(t, "pending set exists", exists(t, vc, "emq:{quotes}:pending"), false)
	deadline, ok := zscore(t, vc, "emq:{quotes}:active", id)
	if !ok || deadline < before+30000 || deadline > after+30000 {
		t.Fatalf("active score %d (present %v), want within [%d, %d]", deadline, ok, before+30000, after+30000)
	}
	row = hgetall(t, vc, "emq:{quotes}:job:JOB0KHTOWnGLuC")
	wantEq(t, "row after claim", len(row), 3)
	wantEq(t, "state", row["state"], "active")
	wantEq(t, "attempts", row["attempts"], "1")

	// The lines as sent: EVALSHA sha numkeys keys values.
	enq := rec.ops(legacy.ScriptEnqueue)[0].Line
	want := []string{"EVALSHA", c.SHA("enqueue"), "2", "emq:{quotes}:job:JOB0KHTOWnGLuC", "emq:{quotes}:pending", id, payload}
	wantEq(t, "enqueue line length", len(enq), len(want))
	for i := range want {
		wantEq(t, "enqueue line", enq[i], want[i])
	}
	claim := rec.ops(legacy.ScriptClaim)[0]
	wantEq(t, "claim line", claim.Line[0]+" "+claim.Line[2]+" "+claim.Line[3]+" "+claim.Line[4]+" "+claim.Line[5],
		"EVALSHA 2 emq:{quotes}:pending emq:{quotes}:active 30000")
	wantEq(t, "claim reply", claim.Reply.String(), `["JOB0KHTOWnGLuC", "{\"symbol\":\"EMQ\",\"px\":\"42.00\"}", 1]`)
	wantEq(t, "pause read", rec.ops("paused")[0].Line[0]+" "+rec.ops("paused")[0].Line[1], "EXISTS emq:{quotes}:paused")
}

// TestOperations runs every operation's success path (and its "nothing to
// do" answer) against a scripts node.
func TestOperations(t *testing.T) { node.EachServer(t, testOperations) }

func testOperations(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	vc := n.Client(t)
	c, _ := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	k := chk{t}
	const q = "ops"

	wantEq(t, "enqueue a", k.b(c.Enqueue(ctx, q, "a", "pa")), true)
	wantEq(t, "enqueue a again", k.b(c.Enqueue(ctx, q, "a", "other")), false)
	wantEq(t, "enqueue b", k.b(c.Enqueue(ctx, q, "b", "pb")), true)
	wantEq(t, "enqueue c", k.b(c.Enqueue(ctx, q, "c", "pc")), true)
	wantEq(t, "stats", k.stats(c.Stats(ctx, q)), [6]int64{3, 0, 0, 0, 0, 0})

	row, found, err := c.Peek(ctx, q, "a")
	if err != nil || !found {
		t.Fatalf("peek a: %v found=%v", err, found)
	}
	wantEq(t, "peek a", row, legacy.Row{State: "pending", Attempts: 0, Payload: "pa"})
	if _, found, err := c.Peek(ctx, q, "nope"); err != nil || found {
		t.Fatalf("peek of a missing row: found=%v err=%v", found, err)
	}

	// Claim a, extend it, complete it.
	job, empty, err := c.Claim(ctx, q, 60000)
	if err != nil || empty || job.ID != "a" {
		t.Fatalf("claim: %+v empty=%v err=%v", job, empty, err)
	}
	now := serverMs(t, vc)
	dl := k.n(c.Extend(ctx, q, "a", 120000))
	if dl < now+120000-1000 || dl > now+120000+1000 {
		t.Fatalf("extend deadline %d, server now %d", dl, now)
	}
	score, _ := zscore(t, vc, legacy.Key(q, "active"), "a")
	wantEq(t, "active score after extend", score, dl)
	wantEq(t, "extend of a pending job", k.n(c.Extend(ctx, q, "b", 1000)), 0)
	wantEq(t, "complete a", k.b(c.Complete(ctx, q, "a")), true)
	wantEq(t, "complete a again", k.b(c.Complete(ctx, q, "a")), false)

	// Claim b, fail it with a backoff (delayed), promote it back.
	job, _, _ = c.Claim(ctx, q, 60000)
	wantEq(t, "claimed", job.ID, "b")
	runAt := k.n(c.Fail(ctx, q, "b", "boom", 3, 0))
	if runAt <= 0 {
		t.Fatalf("fail below max attempts answered %d, want a run-at", runAt)
	}
	wantEq(t, "fail of a job not active", k.n(c.Fail(ctx, q, "b", "boom", 3, 0)), -1)
	wantEq(t, "b state", hgetall(t, vc, legacy.JobKey(q, "b"))["state"], "delayed")
	wantEq(t, "b error", hgetall(t, vc, legacy.JobKey(q, "b"))["error"], "boom")
	// run_at = now + 0 is due as soon as the server's clock reaches it; poll.
	deadline := time.Now().Add(5 * time.Second)
	for k.n(c.Promote(ctx, q, 10)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("promote never moved the delayed job")
		}
	}
	wantEq(t, "b state", hgetall(t, vc, legacy.JobKey(q, "b"))["state"], "pending")

	// b is back at score 0 and ties order by id: b before c.
	job, _, _ = c.Claim(ctx, q, 60000)
	wantEq(t, "claimed", job.ID, "b")
	wantEq(t, "attempts", job.Attempts, 2)
	wantEq(t, "fail at max attempts", k.n(c.Fail(ctx, q, "b", "again", 2, 1000)), 0)
	wantEq(t, "b state", hgetall(t, vc, legacy.JobKey(q, "b"))["state"], "dead")
	wantEq(t, "retry b", k.b(c.Retry(ctx, q, "b")), true)
	wantEq(t, "retry b again", k.b(c.Retry(ctx, q, "b")), false)
	rowB := hgetall(t, vc, legacy.JobKey(q, "b"))
	wantEq(t, "b state", rowB["state"], "pending")
	wantEq(t, "b attempts", rowB["attempts"], "0")
	wantEq(t, "b error dropped", rowB["error"], "")

	// Cancel c, remove b.
	wantEq(t, "cancel c", k.b(c.Cancel(ctx, q, "c")), true)
	wantEq(t, "cancel c again", k.b(c.Cancel(ctx, q, "c")), false)
	wantEq(t, "remove b", k.b(c.Remove(ctx, q, "b")), true)
	wantEq(t, "remove b again", k.b(c.Remove(ctx, q, "b")), false)

	// Reap: a job with a zero lease expires as soon as the clock moves on.
	wantEq(t, "enqueue d", k.b(c.Enqueue(ctx, q, "d", "pd")), true)
	job, _, _ = c.Claim(ctx, q, 0)
	wantEq(t, "claimed", job.ID, "d")
	deadline = time.Now().Add(5 * time.Second)
	for k.n(c.Reap(ctx, q, 10, 1)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("reap never took back the expired job")
		}
	}
	rowD := hgetall(t, vc, legacy.JobKey(q, "d"))
	wantEq(t, "d state", rowD["state"], "dead")
	wantEq(t, "d error", rowD["error"], "lease-expired")

	// Pause and resume.
	wantEq(t, "pause", k.b(c.Pause(ctx, q)), true)
	wantEq(t, "pause again", k.b(c.Pause(ctx, q)), false)
	wantEq(t, "stats paused", k.stats(c.Stats(ctx, q))[5], 1)
	wantEq(t, "resume", k.b(c.Resume(ctx, q)), true)
	wantEq(t, "resume again", k.b(c.Resume(ctx, q)), false)
	// a done, c cancelled (in no set), d dead.
	wantEq(t, "stats", k.stats(c.Stats(ctx, q)), [6]int64{0, 0, 0, 1, 1, 0})
}

// TestErrorReplies checks that a refused call is an error wrapping
// ErrRefused and that Eval returns it as a reply.
func TestErrorReplies(t *testing.T) { node.EachServer(t, testErrorReplies) }

func testErrorReplies(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	c, _ := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	_, err := c.Extend(ctx, "q", "a", -1)
	if !errors.Is(err, legacy.ErrRefused) {
		t.Fatalf("extend with a negative lease: %v, want ErrRefused", err)
	}
	v, err := c.Eval(ctx, legacy.ScriptExtend, []string{legacy.Key("q", "active"), legacy.JobKey("q", "a")}, []string{"a", "-1"})
	if err != nil {
		t.Fatal(err)
	}
	wantEq(t, "reply", v.String(), "(error) EMQWIRE EMQ.EXTEND value 2 must be an integer")
}
