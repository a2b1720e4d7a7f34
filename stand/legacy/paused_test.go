package legacy_test

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestPausedClaimSendsNoScript: on a paused queue Claim reads the flag in
// its own round trip and answers empty; no EVALSHA reaches the server.
func TestPausedClaimSendsNoScript(t *testing.T) { node.EachServer(t, testPausedClaimSendsNoScript) }

func testPausedClaimSendsNoScript(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	vc := n.Client(t)
	c, rec := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	k := chk{t}
	k.b(c.Enqueue(ctx, "pq", "j1", "p1"))
	wantEq(t, "pause", k.b(c.Pause(ctx, "pq")), true)

	before := stats(t, vc)
	job, empty, err := c.Claim(ctx, "pq", 30000)
	if err != nil || !empty {
		t.Fatalf("claim on a paused queue: %+v empty=%v err=%v", job, empty, err)
	}
	d := delta(before, stats(t, vc), "evalsha", "exists", "get")
	wantEq(t, "evalsha during a paused claim", d["evalsha"], 0)
	wantEq(t, "exists during a paused claim", d["exists"], 1)
	wantEq(t, "recorded claim lines", len(rec.ops(legacy.ScriptClaim)), 0)
	wantEq(t, "job still pending", k.stats(c.Stats(ctx, "pq"))[0], 1)

	// The same in a pipeline and in a transaction: the claim is skipped and
	// nothing but the pause read is sent.
	for _, b := range []*legacy.Batch{c.Batch(), c.Tx()} {
		before = stats(t, vc)
		res, err := b.Claim("pq", 30000).Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantEq(t, "skipped", res[0].Skipped, true)
		_, empty, err := res[0].Job()
		wantEq(t, "empty", empty, true)
		wantEq(t, "err", err, nil)
		d = delta(before, stats(t, vc), "evalsha", "exists", "multi")
		wantEq(t, "evalsha during a paused batched claim", d["evalsha"], 0)
		wantEq(t, "multi during a paused batched claim", d["multi"], 0)
		wantEq(t, "exists during a paused batched claim", d["exists"], 1)
	}

	wantEq(t, "resume", k.b(c.Resume(ctx, "pq")), true)
	job, empty, err = c.Claim(ctx, "pq", 30000)
	if err != nil || empty || job.ID != "j1" {
		t.Fatalf("claim after resume: %+v empty=%v err=%v", job, empty, err)
	}
}
