package e2e

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestSeedTransitionIntegration is the seed's own case: enqueue
// JOB0KHTOWnGLuC on quotes, then claim it with a 30000 ms lease, and check
// after each move exactly what the seed says the node holds.
func TestSeedTransitionIntegration(t *testing.T) { node.EachServer(t, testSeedTransitionIntegration) }

func testSeedTransitionIntegration(t *testing.T, server node.Server) {
	runBoth(t, server, seedTransition)
}

// seedTransition is the seed's scenario on one path.
func seedTransition(t testing.TB, tr *Transcript) {
	const (
		q     = "quotes"
		id    = "JOB0KHTOWnGLuC"
		lease = 30000
	)
	payload := `{"symbol":"EMQ","bid":"101.25","ask":"101.40"}`
	rowKey, pending, active := legacy.JobKey(q, id), legacy.Key(q, "pending"), legacy.Key(q, "active")
	ctx := testCtx(t)
	var c *legacy.Client
	tr.Step("connect", func() { c = tr.Dial("quotes-worker") })

	tr.Step("enqueue", func() { want(t, true)(c.Enqueue(ctx, q, id, payload)) })
	// The row with state pending, attempts 0 and the payload; the id in
	// the pending set at score 0.
	expectKeys(t, tr.Path, tr.Keys("after enqueue"), Snapshot{
		rowKey:  row("pending", "0", payload),
		pending: zset(Member{id, 0}),
	}, nil)

	tr.Step("claim", func() { claims(t, legacy.Job{ID: id, Payload: payload, Attempts: 1})(c.Claim(ctx, q, lease)) })
	// The pending set is gone, the active set holds the id at the lease
	// deadline (server time + 30000), the row says active, attempts 1;
	// the module's row carries lease_epoch = run_id, the scripts' does not.
	claimed := row("active", "1", payload)
	if tr.Path.RunID != "" {
		claimed.Hash[LeaseEpoch] = tr.Path.RunID
	}
	s := lastStep(tr)
	expectKeys(t, tr.Path, tr.Keys("after claim"), Snapshot{
		rowKey: claimed,
		active: zset(Member{id, 0}),
	}, map[string][2]int64{active: {s.Lo + lease, s.Hi + lease}})
}
