package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Queue placement of the routing tests.
const (
	quotes  = "quotes"  // on the module node
	billing = "billing" // on the scripts node, then moved to the module node
)

// routedStand is one proxy in front of a module node (module-a, the
// default route) and a scripts node (scripts-b, queue billing).
type routedStand struct {
	Addr            string
	Proxy           *proxy.Server
	Module, Scripts *Path // paths through the proxy to each node's data
	audit           *AuditSink
}

// startRouted starts both nodes and the proxy; every upstream connection
// passes its role's fence (wire-6 on the module node, wire-4 against the
// map's legacy brand on the scripts node), both nodes on server.
func startRouted(t *testing.T, server node.Server, m *shamap.Map) *routedStand {
	t.Helper()
	ctx := testCtx(t)
	mod := node.StartT(t, node.Options{Role: node.Module, Server: server.Path})
	scr := node.StartT(t, node.Options{Role: node.Scripts, Brand: m.LegacyBrand, Server: server.Path})
	rs := &routedStand{audit: &AuditSink{}}
	rs.Module = &Path{Name: ProxyPath, Node: mod, Direct: mod.Client(t), Map: m}
	rs.Scripts = &Path{Name: ScriptsPath, Node: scr, Direct: scr.Client(t), Map: m}
	var err error
	if rs.Module.RunID, err = RunID(ctx, rs.Module.Direct); err != nil {
		t.Fatal(err)
	}
	srv, addr := ServeProxy(t, proxy.Options{
		Upstreams: []proxy.UpstreamOptions{
			{Name: "module-a", Address: mod.Addr, Role: proxy.RoleModule, OnConnect: func(ctx context.Context, c fence.Conn) error {
				_, err := fence.CheckModule(ctx, c, m, false)
				return err
			}},
			{Name: "scripts-b", Address: scr.Addr, Role: proxy.RoleScripts, OnConnect: func(ctx context.Context, c fence.Conn) error {
				_, err := fence.CheckScripts(ctx, c, m.LegacyBrand, false)
				return err
			}},
		},
		Routes: []proxy.Route{
			{Queues: []string{billing}, Upstream: "scripts-b"},
			{Queues: []string{"*"}, Upstream: "module-a"},
		},
		Policy: &rewrite.Policy{Map: m},
	}, rs.audit.Logger())
	rs.Addr, rs.Proxy = addr, srv
	rs.Module.Addr, rs.Scripts.Addr = rs.Addr, rs.Addr
	rs.Module.Proxy, rs.Scripts.Proxy = srv, srv
	if err := WaitFor(ctx, srv.Ready); err != nil {
		t.Fatalf("%v: proxy never ready: %v (%v)", ErrStand, err, srv.Readiness())
	}
	return rs
}

// queueWork is the scenario each queue gets, on whichever node holds it:
// enqueue, claim, extend, complete, fail to delayed, pause and resume,
// stats and peek.
func queueWork(q string) scenario {
	return func(t testing.TB, tr *Transcript) {
		ctx := testCtx(t)
		var c *legacy.Client
		tr.Step("connect", func() { c = tr.Dial(q + "-worker") })
		tr.Step("enqueue", func() {
			for _, id := range []string{"J1", "J2", "J3"} {
				want(t, true)(c.Enqueue(ctx, q, id, "payload of "+id))
			}
			want(t, false)(c.Enqueue(ctx, q, "J1", "again"))
		})
		tr.Step("claim, extend, complete J1", func() {
			claims(t, legacy.Job{ID: "J1", Payload: "payload of J1", Attempts: 1})(c.Claim(ctx, q, 30000))
			if _, err := c.Extend(ctx, q, "J1", 60000); err != nil {
				t.Fatal(err)
			}
			want(t, true)(c.Complete(ctx, q, "J1"))
		})
		tr.Step("claim J2, fail it", func() {
			claims(t, legacy.Job{ID: "J2", Payload: "payload of J2", Attempts: 1})(c.Claim(ctx, q, 30000))
			if _, err := c.Fail(ctx, q, "J2", "upstream timeout", 3, 5000); err != nil {
				t.Fatal(err)
			}
		})
		tr.Step("pause, resume, read", func() {
			want(t, true)(c.Pause(ctx, q))
			claimsNothing(t)(c.Claim(ctx, q, 30000))
			want(t, true)(c.Resume(ctx, q))
			peeks(t, legacy.Row{State: "pending", Attempts: 0, Payload: "payload of J3"})(c.Peek(ctx, q, "J3"))
			if _, err := c.Stats(ctx, q); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// runRouted runs sc on a fresh scripts node of server directly and on path (through
// the routing proxy), and compares the two runs reply by reply and key by
// key (time scores masked to their steps' windows, lease_epoch checked
// against the module node's run_id).
func runRouted(t *testing.T, server node.Server, m *shamap.Map, path *Path, sc scenario) *Transcript {
	t.Helper()
	ref := NewTranscript(t, testCtx(t), StartScripts(t, server, m))
	sc(t, ref)
	ref.Finish()
	got := NewTranscript(t, testCtx(t), path)
	sc(t, got)
	got.Finish()
	if t.Failed() {
		t.FailNow()
	}
	if diffs := Compare(ref, got); len(diffs) > 0 {
		t.Fatal(FormatDiffs("scripts node directly", "through the routing proxy", diffs))
	}
	return got
}

// TestRoutingByQueueIntegration drives queue quotes (module node) and
// queue billing (scripts node) through one proxy address with the legacy
// client, refuses what cannot be split, splits a pipeline that spans both,
// then moves billing to the module node by a route swap.
func TestRoutingByQueueIntegration(t *testing.T) { node.EachServer(t, testRoutingByQueueIntegration) }

func testRoutingByQueueIntegration(t *testing.T, server node.Server) {
	m := LoadMap(t)
	rs := startRouted(t, server, m)
	ctx := testCtx(t)

	// Each queue's calls equal what a scripts node would do with them.
	runRouted(t, server, m, rs.Module, queueWork(quotes))
	runRouted(t, server, m, rs.Scripts, queueWork(billing))
	onlyQueue(t, ctx, rs.Module, quotes)
	onlyQueue(t, ctx, rs.Scripts, billing)
	noModuleLua(t, rs.Module)
	if st := commandStats(t, rs.Scripts.Direct); st["evalsha"] == 0 || st["emq.enqueue"] != 0 {
		t.Errorf("scripts node: evalsha %d, emq.enqueue %d", st["evalsha"], st["emq.enqueue"])
	}

	c, err := legacy.Dial(ctx, legacy.Options{Addr: rs.Addr, Map: m, Brand: m.LegacyBrand})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	before := map[*Path]Snapshot{rs.Module: snapshot(t, ctx, rs.Module), rs.Scripts: snapshot(t, ctx, rs.Scripts)}
	statsBefore := map[*Path]map[string]int64{rs.Module: commandStats(t, rs.Module.Direct), rs.Scripts: commandStats(t, rs.Scripts.Direct)}

	t.Run("cross-route transaction is refused with nothing sent", func(t *testing.T) {
		res, err := c.Tx().Enqueue(quotes, "T1", "p").Enqueue(billing, "T1", "p").Exec(ctx)
		t.Logf("transaction: %v %v", res, err)
		if err == nil {
			if len(res) != 2 || !strings.HasPrefix(res[1].Reply.Str, "CROSSROUTE") || !strings.HasPrefix(res[0].Reply.Str, "EXECABORT") {
				t.Errorf("transaction replies %v, want EXECABORT and CROSSROUTE", res)
			}
		} else if !strings.Contains(err.Error(), "CROSSROUTE") && !strings.Contains(err.Error(), "EXECABORT") {
			t.Errorf("transaction: %v", err)
		}
	})
	t.Run("cross-queue script call is refused with nothing sent", func(t *testing.T) {
		v, err := c.Eval(ctx, legacy.ScriptEnqueue, []string{legacy.JobKey(quotes, "X1"), legacy.Key(billing, "pending")}, []string{"X1", "p"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Kind != legacy.KindError || !strings.HasPrefix(v.Str, "CROSSROUTE the keys of 'EVALSHA' route to upstreams module-a and scripts-b") {
			t.Errorf("reply %v", v)
		}
	})
	for _, p := range []*Path{rs.Module, rs.Scripts} {
		if diff := snapshotDiff(before[p], snapshot(t, ctx, p)); diff != "" {
			t.Errorf("%s node changed after the refusals: %s", p.Name, diff)
		}
		st := commandStats(t, p.Direct)
		for _, name := range []string{"multi", "exec", "evalsha", "emq.enqueue"} {
			if st[name] != statsBefore[p][name] {
				t.Errorf("%s node ran %s %d more times after the refusals", p.Name, name, st[name]-statsBefore[p][name])
			}
		}
	}

	t.Run("a pipeline spanning both upstreams is split, replies in order", func(t *testing.T) {
		b := c.Batch()
		for i := range 8 {
			q := []string{quotes, billing}[i%2]
			b.Enqueue(q, fmt.Sprintf("P%d", i), "p").Stats(q)
		}
		res, err := b.Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pending := map[string]int64{}
		for _, q := range []string{quotes, billing} {
			st, err := c.Stats(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			pending[q] = st[0] - 4 // before the batch's four enqueues
		}
		for i := range 8 {
			q := []string{quotes, billing}[i%2]
			if ok, err := res[2*i].Bool(); err != nil || !ok {
				t.Errorf("reply %d (enqueue %s): %v %v", 2*i, q, ok, err)
			}
			pending[q]++
			st, err := res[2*i+1].Stats()
			if err != nil || st[0] != pending[q] {
				t.Errorf("reply %d (stats %s): pending %d, want %d (%v)", 2*i+1, q, st[0], pending[q], err)
			}
		}
		onlyQueue(t, ctx, rs.Module, quotes)
		onlyQueue(t, ctx, rs.Scripts, billing)
	})

	t.Run("billing moves to the module node", func(t *testing.T) {
		modBefore, scrBefore := commandStats(t, rs.Module.Direct), commandStats(t, rs.Scripts.Direct)
		if err := rs.Proxy.SwapRoutes([]proxy.Route{{Queues: []string{"*"}, Upstream: "module-a"}}); err != nil {
			t.Fatal(err)
		}
		want(t, true)(c.Enqueue(ctx, billing, "S1", "after the move"))
		claims(t, legacy.Job{ID: "S1", Payload: "after the move", Attempts: 1})(c.Claim(ctx, billing, 30000))
		want(t, true)(c.Complete(ctx, billing, "S1"))
		mod, scr := delta(modBefore, commandStats(t, rs.Module.Direct)), delta(scrBefore, commandStats(t, rs.Scripts.Direct))
		if mod["emq.enqueue"] != 1 || mod["emq.claim"] != 1 || mod["emq.complete"] != 1 {
			t.Errorf("module node after the move: %v", mod)
		}
		if scr["evalsha"] != 0 {
			t.Errorf("scripts node still got %d evalsha after the move", scr["evalsha"])
		}
		if got := upstreamsOf(rs.audit, "rewrite", billing); strings.Join(got, ",") != "module-a,module-a,module-a" {
			t.Errorf("audit rewrites of billing went to %v", got)
		}
		if got := upstreamsOf(rs.audit, "pass", billing); len(got) == 0 || strings.Count(strings.Join(got, ","), "scripts-b") != len(got) {
			t.Errorf("audit passes of billing (before the move) went to %v", got)
		}
		noModuleLua(t, rs.Module)
	})
}

// onlyQueue checks that every key of the node is one of queue's.
func onlyQueue(t *testing.T, ctx context.Context, p *Path, queue string) {
	t.Helper()
	for _, name := range snapshot(t, ctx, p).Names() {
		if !strings.Contains(name, "{"+queue+"}") {
			t.Errorf("%s node holds %s, not a key of queue %s", p.Name, name, queue)
		}
	}
}

// noModuleLua checks that no script but the declared reads (EVALSHA_RO)
// ran on the module node.
func noModuleLua(t *testing.T, p *Path) {
	t.Helper()
	st := commandStats(t, p.Direct)
	for _, name := range []string{"eval", "evalsha", "eval_ro", "fcall", "fcall_ro", "function|load"} {
		if st[name] != 0 {
			t.Errorf("the module node ran %s %d times; only EVALSHA_RO of the reads may reach it", name, st[name])
		}
	}
	if st["evalsha_ro"] == 0 {
		t.Error("the module node ran no declared read (EVALSHA_RO)")
	}
}

func snapshot(t *testing.T, ctx context.Context, p *Path) Snapshot {
	t.Helper()
	s, err := ReadKeys(ctx, p.Direct)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// snapshotDiff names the first difference between two snapshots, or "".
func snapshotDiff(a, b Snapshot) string {
	for _, n := range a.Names() {
		if _, ok := b[n]; !ok {
			return n + " disappeared"
		}
		if a[n].String() != b[n].String() {
			return n + " changed"
		}
	}
	for _, n := range b.Names() {
		if _, ok := a[n]; !ok {
			return n + " appeared"
		}
	}
	return ""
}

// auditSink collects the proxy's audit lines.
// upstreams returns the upstream of every audit record with message msg
// for a script call on queue, in order.
func upstreamsOf(s *AuditSink, msg, queue string) []string {
	var out []string
	for _, r := range s.Records() {
		if r["msg"] == msg && r["queue"] == queue {
			u, _ := r["upstream"].(string)
			out = append(out, u)
		}
	}
	return out
}
