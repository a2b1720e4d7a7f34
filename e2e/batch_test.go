package e2e

import (
	"fmt"
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"

	"github.com/emqproxy/emqproxy/stand/node"
)

// mixed queues n calls of every kind on queue q, job ids counting from
// base: enqueues, claims, completes, extends and fails of earlier jobs
// (some active, some not), and the reads.
func mixed(b *legacy.Batch, q string, base, n int) *legacy.Batch {
	id := func(i int) string { return fmt.Sprintf("P%05d", max(base+i, 0)) }
	for i := range n {
		switch i % 8 {
		case 0, 7:
			b.Enqueue(q, id(i), "payload "+id(i))
		case 1:
			b.Claim(q, 30000)
		case 2:
			b.Peek(q, id(i-2))
		case 3:
			b.Complete(q, id(i-3))
		case 4:
			b.Extend(q, id(i-4), 45000)
		case 5:
			b.Stats(q)
		case 6:
			b.Fail(q, id(i-6), "flaky", 3, 10000)
		}
	}
	return b
}

// noErrors checks that no reply of a batch is an error.
func noErrors(t testing.TB, rs []legacy.Result, err error, n int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != n {
		t.Fatalf("%d results for %d calls", len(rs), n)
	}
	for i, r := range rs {
		if r.Reply.Kind == legacy.KindError {
			t.Fatalf("call %d (%s) answered %s", i, r.Op, r.Reply)
		}
	}
}

// TestPipelinesIntegration sends pipelines of 1 to 1000 mixed calls
// (legacy Batch: one round trip for the pause reads, one for the lines),
// and a pipeline whose claims hit a paused queue and are not sent.
func TestPipelinesIntegration(t *testing.T) { node.EachServer(t, testPipelinesIntegration) }

func testPipelinesIntegration(t *testing.T, server node.Server) {
	const q = "pipe"
	runBoth(t, server, func(t testing.TB, tr *Transcript) {
		ctx := testCtx(t)
		var c *legacy.Client
		tr.Step("connect", func() { c = tr.Dial("pipe-worker") })
		base := 0
		for _, n := range []int{1, 2, 3, 8, 10, 100, 333, 1000} {
			tr.Step(fmt.Sprintf("pipeline of %d", n), func() {
				rs, err := mixed(c.Batch(), q, base, n).Exec(ctx)
				noErrors(t, rs, err, n)
			})
			base += n
		}
		tr.Keys("after the pipelines")

		tr.Step("pipeline with claims on a paused queue", func() {
			rs, err := c.Batch().Pause("stopped").Enqueue("stopped", "S1", "x").Exec(ctx)
			noErrors(t, rs, err, 2)
			rs, err = c.Batch().Claim("stopped", 30000).Stats("stopped").Claim(q, 30000).Claim("stopped", 30000).Exec(ctx)
			noErrors(t, rs, err, 4)
			for i, skipped := range []bool{true, false, false, true} {
				if rs[i].Skipped != skipped {
					t.Errorf("call %d (%s): skipped %v, want %v", i, rs[i].Op, rs[i].Skipped, skipped)
				}
			}
			want(t, [6]int64{1, 0, 0, 0, 0, 1})(rs[1].Stats())
		})
	})
}

// TestTransactionsIntegration sends MULTI/EXEC blocks of mixed calls
// (legacy Tx, on a dedicated connection), the first ones on cold script
// caches. A line that gets NOSCRIPT inside EXEC is sent again by the client
// in a second MULTI/EXEC, after the rest of the first one ran; so the cold
// transactions here are built so that this reordering cannot change a
// reply (every cold line of a block is cold on both paths, or is a read
// placed last), and the scripts the mixed blocks use are warm before them.
func TestTransactionsIntegration(t *testing.T) { node.EachServer(t, testTransactionsIntegration) }

func testTransactionsIntegration(t *testing.T, server node.Server) {
	const q = "tx"
	runBoth(t, server, func(t testing.TB, tr *Transcript) {
		ctx := testCtx(t)
		var c *legacy.Client
		tr.Step("connect", func() { c = tr.Dial("tx-worker") })
		tr.Step("a transaction of writes on a cold cache", func() {
			rs, err := c.Tx().Enqueue(q, "T1", "one").Enqueue(q, "T2", "two").Claim(q, 30000).Complete(q, "T1").Exec(ctx)
			noErrors(t, rs, err, 4)
			want(t, true)(rs[3].Bool())
		})
		tr.Step("a transaction ending in reads, cache cold for them", func() {
			rs, err := c.Tx().Enqueue(q, "T3", "three").Stats(q).Peek(q, "T3").Exec(ctx)
			noErrors(t, rs, err, 3)
			want(t, [6]int64{2, 0, 0, 1, 0, 0})(rs[1].Stats())
		})
		tr.Step("a transaction warming extend and fail", func() {
			rs, err := c.Tx().Extend(q, "T9", 1000).Fail(q, "T9", "never ran", 3, 0).Exec(ctx)
			noErrors(t, rs, err, 2)
			want(t, int64(0))(rs[0].Int())
			want(t, int64(-1))(rs[1].Int())
		})
		base := 0
		for _, n := range []int{1, 10, 100, 500} {
			tr.Step(fmt.Sprintf("a transaction of %d", n), func() {
				rs, err := mixed(c.Tx(), q, base, n).Exec(ctx)
				noErrors(t, rs, err, n)
			})
			base += n
		}
	})
}
