package e2e

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestNoScriptIntegration runs a session on cold script caches. Directly
// on the scripts node, the first EVALSHA of each script gets NOSCRIPT and
// the client loads the body once and sends the same line again. Through
// the proxy a verb line never gets NOSCRIPT (it becomes EMQ.<TOKEN>, which
// has no sha to miss), while a read (EVALSHA_RO of stats or peek) passes
// unchanged and gets NOSCRIPT on the fresh module node, and the client's
// SCRIPT LOAD fallback works through the proxy. The client sees the same
// replies either way.
func TestNoScriptIntegration(t *testing.T) { node.EachServer(t, testNoScriptIntegration) }

func testNoScriptIntegration(t *testing.T, server node.Server) {
	const q = "cold"
	scripts, proxied := runBoth(t, server, func(t testing.TB, tr *Transcript) {
		ctx := testCtx(t)
		var c *legacy.Client
		tr.Step("connect", func() { c = tr.Dial("cold-worker") })
		tr.Step("first use of each script", func() {
			want(t, true)(c.Enqueue(ctx, q, "A", "first"))
			claims(t, legacy.Job{ID: "A", Payload: "first", Attempts: 1})(c.Claim(ctx, q, 30000))
			want(t, [6]int64{0, 0, 1, 0, 0, 0})(c.Stats(ctx, q))
			peeks(t, legacy.Row{State: "active", Attempts: 1, Payload: "first"})(c.Peek(ctx, q, "A"))
		})
		tr.Step("second use of each script", func() {
			want(t, true)(c.Enqueue(ctx, q, "B", "second"))
			claims(t, legacy.Job{ID: "B", Payload: "second", Attempts: 1})(c.Claim(ctx, q, 30000))
			want(t, [6]int64{0, 0, 2, 0, 0, 0})(c.Stats(ctx, q))
			peeks(t, legacy.Row{State: "active", Attempts: 1, Payload: "second"})(c.Peek(ctx, q, "B"))
		})
	})

	// Which lines got NOSCRIPT (Call.Reloaded), per path.
	reloaded := func(tr *Transcript) map[string][]bool {
		out := map[string][]bool{}
		for _, c := range tr.Calls() {
			if c.Op != "boot" && c.Op != "fence" && c.Op != "paused" {
				out[c.Op] = append(out[c.Op], c.Reloaded)
			}
		}
		return out
	}
	check := func(tr *Transcript, want map[string][]bool) {
		t.Helper()
		got := reloaded(tr)
		for op, w := range want {
			if len(got[op]) != len(w) || got[op][0] != w[0] || got[op][1] != w[1] {
				t.Errorf("%s path: %s got NOSCRIPT %v, want %v", tr.Path.Name, op, got[op], w)
			}
		}
	}
	firstOnly := []bool{true, false}
	never := []bool{false, false}
	check(scripts, map[string][]bool{
		legacy.ScriptEnqueue: firstOnly, legacy.ScriptClaim: firstOnly,
		legacy.ScriptStats: firstOnly, legacy.ScriptPeek: firstOnly,
	})
	check(proxied, map[string][]bool{
		legacy.ScriptEnqueue: never, legacy.ScriptClaim: never,
		legacy.ScriptStats: firstOnly, legacy.ScriptPeek: firstOnly,
	})

	// The loads reached the nodes: four bodies on the scripts node, only
	// the two reads on the module node, which ran the verbs as commands.
	st := scripts.EndStats
	if st["script|load"] != 4 {
		t.Errorf("scripts node: SCRIPT LOAD ran %d times, want 4", st["script|load"])
	}
	st = proxied.EndStats
	if st["script|load"] != 2 || st["emq.enqueue"] != 2 || st["emq.claim"] != 2 {
		t.Errorf("module node: SCRIPT LOAD %d (want 2), EMQ.ENQUEUE %d (want 2), EMQ.CLAIM %d (want 2)",
			st["script|load"], st["emq.enqueue"], st["emq.claim"])
	}
}
