package legacy_test

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestNoScriptLoadsOnce: on a fresh node the first call gets NOSCRIPT, the
// client sends SCRIPT LOAD once and the same line again; the next call of the
// same script is one EVALSHA.
func TestNoScriptLoadsOnce(t *testing.T) { node.EachServer(t, testNoScriptLoadsOnce) }

func testNoScriptLoadsOnce(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	vc := n.Client(t)
	c, rec := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	k := chk{t}

	before := stats(t, vc)
	wantEq(t, "enqueue", k.b(c.Enqueue(ctx, "ns", "j1", "p1")), true)
	d := delta(before, stats(t, vc), "evalsha", "script|load")
	wantEq(t, "evalsha after the first call", d["evalsha"], 2)
	wantEq(t, "script load after the first call", d["script|load"], 1)

	wantEq(t, "enqueue", k.b(c.Enqueue(ctx, "ns", "j2", "p2")), true)
	d = delta(before, stats(t, vc), "evalsha", "script|load")
	wantEq(t, "evalsha after the second call", d["evalsha"], 3)
	wantEq(t, "script load after the second call", d["script|load"], 1)

	calls := rec.ops(legacy.ScriptEnqueue)
	wantEq(t, "recorded enqueues", len(calls), 2)
	wantEq(t, "first reloaded", calls[0].Reloaded, true)
	wantEq(t, "second reloaded", calls[1].Reloaded, false)
	wantEq(t, "first reply", calls[0].Reply.String(), "1")
}

// TestNoScriptInPipelineAndTx: a cold cache inside a pipeline and inside
// MULTI/EXEC loads each script once and answers every call.
func TestNoScriptInPipelineAndTx(t *testing.T) { node.EachServer(t, testNoScriptInPipelineAndTx) }

func testNoScriptInPipelineAndTx(t *testing.T, srv node.Server) {
	for _, tx := range []bool{false, true} {
		name := "pipeline"
		if tx {
			name = "tx"
		}
		t.Run(name, func(t *testing.T) {
			n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
			vc := n.Client(t)
			c, _ := dial(t, legacy.Options{Addr: n.Addr})
			ctx := testCtx(t)
			b := c.Batch()
			if tx {
				b = c.Tx()
			}
			b.Enqueue("np", "j1", "p1").Enqueue("np", "j2", "p2").Stats("np").Enqueue("np", "j3", "p3")
			before := stats(t, vc)
			res, err := b.Exec(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"1", "1", "[2, 0, 0, 0, 0, 0]", "1"} {
				wantEq(t, "reply", res[i].Reply.String(), want)
				wantEq(t, "reloaded", res[i].Reloaded, true)
			}
			d := delta(before, stats(t, vc), "evalsha", "evalsha_ro", "script|load")
			wantEq(t, "script loads", d["script|load"], 2) // enqueue and stats, once each
			wantEq(t, "evalsha", d["evalsha"], 6)
			wantEq(t, "evalsha_ro", d["evalsha_ro"], 2)
		})
	}
}
