package e2e

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestPausedQueueIntegration claims from a paused queue: the client reads
// the pause flag in a round trip of its own and answers empty, and neither
// line is sent: the node's INFO commandstats show the flag read and no
// EVALSHA (scripts node) and no EMQ.CLAIM (module node) for that claim.
func TestPausedQueueIntegration(t *testing.T) { node.EachServer(t, testPausedQueueIntegration) }

func testPausedQueueIntegration(t *testing.T, server node.Server) {
	const q = "held"
	runBoth(t, server, func(t testing.TB, tr *Transcript) {
		ctx := testCtx(t)
		var c *legacy.Client
		tr.Step("connect, enqueue, pause", func() {
			c = tr.Dial("held-worker")
			want(t, true)(c.Enqueue(ctx, q, "H1", "on hold"))
			want(t, true)(c.Pause(ctx, q))
		})

		before := commandStats(t, tr.Path.Direct)
		tr.Step("claim while paused", func() { claimsNothing(t)(c.Claim(ctx, q, 30000)) })
		sent := delta(before, commandStats(t, tr.Path.Direct))
		delete(sent, "info") // the commandstats read itself
		delete(sent, "time") // the step's window
		if sent["exists"] != 1 || len(sent) != 1 {
			t.Errorf("%s path: a claim on a paused queue sent %v, want only the flag read (exists: 1)", tr.Path.Name, sent)
		}
		tr.Keys("paused, nothing claimed")

		tr.Step("resume, claim", func() {
			want(t, true)(c.Resume(ctx, q))
			claims(t, legacy.Job{ID: "H1", Payload: "on hold", Attempts: 1})(c.Claim(ctx, q, 30000))
		})
	})
}
