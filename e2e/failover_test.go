package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/discovery"
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Failover (proxy.md, "Sentinel"; the proxy's failover.go and ack.go):
// legacy clients work through the proxy in front of a module master set
// under Sentinel (a primary, its replica and three sentinels on the stand)
// while the primary is SIGKILLed and the sentinels promote the replica.

// Bounds of the failover tests.
const (
	failoverWait = 5 * time.Second        // the upstream's failover_wait
	ackTimeout   = 500 * time.Millisecond // ack_timeout, with ack_replicas 1
	haWait       = 60 * time.Second       // the stand's own waits
)

// haFront starts a module master set under Sentinel and a proxy in front
// of it (the master set as its upstream, fenced as a module node), with
// ack_replicas 1 when ack is set, and waits until the proxy is ready.
func haFront(t *testing.T, server node.Server, m *shamap.Map, ack bool) (*node.HA, *proxy.Server, string) {
	t.Helper()
	if _, err := node.BuildModule(); err != nil {
		t.Fatalf("%v: module: %v", ErrStand, err)
	}
	h := node.StartHAT(t, node.HAOptions{Server: server.Path, Role: node.Module})
	up := proxy.UpstreamOptions{
		Name:         "module",
		Sentinel:     &discovery.Options{Master: h.Master, Addresses: h.SentinelAddrs()},
		DialTimeout:  time.Second,
		Timeout:      2 * time.Second,
		FailoverWait: failoverWait,
	}
	if ack {
		up.AckReplicas, up.AckTimeout = 1, ackTimeout
	}
	srv, addr := ServeProxy(t, proxy.Options{
		Upstream: up,
		OnConnect: func(ctx context.Context, c fence.Conn) error {
			_, err := fence.CheckModule(ctx, c, m, false)
			return err
		},
		Policy: &rewrite.Policy{Map: m},
	}, nil)
	if err := WaitFor(testCtx(t), srv.Ready); err != nil {
		t.Fatalf("%v: proxy never ready: %v (%v)", ErrStand, err, srv.Readiness())
	}
	return h, srv, addr
}

// killAndResume SIGKILLs the primary and returns the promoted replica,
// with how long after the kill the sentinels promoted it and the proxy
// served a command again.
// then, when set, runs right after the kill.
func killAndResume(t *testing.T, h *node.HA, addr string, then func() error) (promoted *node.Node, promotedAfter, servedAfter time.Duration) {
	t.Helper()
	killed := time.Now()
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if then != nil {
		if err := then(); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		var err error
		promoted, err = h.WaitPromoted(haWait)
		promotedAfter = time.Since(killed)
		done <- err
	}()
	firstSuccess(t, addr)
	servedAfter = time.Since(killed)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return promoted, promotedAfter, servedAfter
}

// acknowledged counts the load's acknowledged enqueues on n: those whose
// row is there and whose id is in exactly one of the pending and active
// sets (once), and the ones missing. Anything else (a row without its id,
// an id twice) is a test failure.
func acknowledged(t *testing.T, l *load, n *node.Node) (once, missing int) {
	t.Helper()
	l.mu.Lock()
	ids := make([]string, 0, len(l.acked))
	for id := range l.acked {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	c := n.Client(t)
	ctx := testCtx(t)
	for _, id := range ids {
		row, err := c.Do(ctx, c.B().Exists().Key(legacy.JobKey(l.q, id)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		in := 0
		for _, set := range []string{"pending", "active"} {
			_, err := c.Do(ctx, c.B().Zscore().Key(legacy.Key(l.q, set)).Member(id).Build()).AsFloat64()
			if err == nil {
				in++
			}
		}
		switch {
		case row == 0 && in == 0:
			missing++
		case row == 1 && in == 1:
			once++
		default:
			t.Errorf("acknowledged enqueue %s: row %d, in %d of the pending and active sets", id, row, in)
		}
	}
	return once, missing
}

// loadInvariants checks what holds with or without ack_replicas: nothing
// was applied twice, nothing claimed twice, and no call outlived bound.
func loadInvariants(t *testing.T, l *load, bound time.Duration) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.doubles) > 0 {
		t.Errorf("jobs claimed by two clients: %v", l.doubles)
	}
	if len(l.existed) > 0 {
		t.Errorf("enqueues of new ids answered 'existed' (applied twice?): %v", l.existed)
	}
	if l.maxCall > bound {
		t.Errorf("a call took %v (bound %v)", l.maxCall, bound)
	}
	kinds := map[string]int{}
	for text, n := range l.errTexts {
		switch {
		case strings.Contains(text, "write not confirmed"):
			text = "not confirmed by the replicas"
		case strings.Contains(text, "has no primary"):
			text = "no primary"
		}
		kinds[text] += n
	}
	t.Logf("load: %d calls, %d errors %v; %d enqueues acknowledged, %d errored, %d jobs claimed; slowest call %v (bound %v)",
		l.calls, l.callErrs, kinds, len(l.acked), len(l.errored), len(l.claimed), l.maxCall.Round(time.Millisecond), bound)
}

func TestFailoverUnderLoadIntegration(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the sentinels' down-after and failover): overlaps the other failovers
	node.EachServerParallel(t, testFailoverUnderLoad)
}

// testFailoverUnderLoad: legacy workers enqueue and claim through the
// proxy; the primary is SIGKILLed; service resumes on the promoted
// replica within a second of its promotion; no call outlives failover_wait
// (plus WAIT's timeout); with ack_replicas 1 every acknowledged enqueue is
// on the new primary exactly once, without it the loss is measured.
func testFailoverUnderLoad(t *testing.T, server node.Server) {
	m := LoadMap(t)
	for _, ack := range []bool{false, true} {
		t.Run(fmt.Sprintf("ack_replicas %d", map[bool]int{false: 0, true: 1}[ack]), func(t *testing.T) {
			h, _, addr := haFront(t, server, m, ack)
			// Workers pause 10 ms after a failed enqueue: with
			// ack_replicas and no replica, every write fails at once.
			l := startLoadBackoff(t, m, addr, "failover", 10*time.Millisecond)
			l.waitCalls(t, 300)
			// The replica falls behind (stopped while the load makes 100
			// calls), then the primary dies: what the primary acknowledged
			// meanwhile and had not handed to the kernel is gone.
			if err := h.Replica.Freeze(); err != nil {
				t.Fatal(err)
			}
			l.waitCalls(t, 100)
			promoted, promotedAfter, servedAfter := killAndResume(t, h, addr, h.Replica.Thaw)
			t.Logf("%s: the sentinels promoted %s %v after the SIGKILL; the proxy served again %v after it",
				server.Name, promoted.Addr, promotedAfter.Round(time.Millisecond), servedAfter.Round(time.Millisecond))
			if servedAfter > promotedAfter+time.Second {
				t.Errorf("served again %v after the promotion (bound: one second)", servedAfter-promotedAfter)
			}
			bound := failoverWait + time.Second
			if ack {
				// The promoted node has no replica: every write is
				// unconfirmed until the old primary comes back as its
				// replica; a write waits at most for the WAIT ahead of
				// it and its own (ack.go).
				bound += 2 * ackTimeout
				l.waitCalls(t, 100)
				if err := h.Rejoin(h.Primary, node.Options{Role: node.Module, Server: server.Path, ReplicaOf: promoted.Addr}, haWait); err != nil {
					t.Fatal(err)
				}
				// The set whole again: the restarted node synchronised as
				// the promoted one's replica, or (a loaded machine, the
				// sentinels failed over once more) the other way round.
				master, err := h.WaitWhole(haWait)
				if err != nil {
					t.Fatal(err)
				}
				if master != promoted {
					t.Logf("the sentinels failed over once more, to %s", master.Addr)
					promoted = master
				}
				l.mu.Lock()
				acked := len(l.acked)
				l.mu.Unlock()
				if err := WaitFor(testCtx(t), func() bool {
					l.mu.Lock()
					defer l.mu.Unlock()
					return len(l.acked) >= acked+100
				}); err != nil {
					t.Fatal("no enqueue acknowledged after the replica returned")
				}
			}
			l.waitCalls(t, 300)
			l.finish()
			loadInvariants(t, l, bound)
			once, missing := acknowledged(t, l, promoted)
			t.Logf("%s, ack_replicas %v: %d acknowledged enqueues on the new primary exactly once, %d lost",
				server.Name, map[bool]int{false: 0, true: 1}[ack], once, missing)
			if ack && missing > 0 {
				t.Errorf("%d acknowledged enqueues lost with ack_replicas 1", missing)
			}
			if once == 0 {
				t.Error("no acknowledged enqueue on the new primary")
			}
		})
	}
}

func TestFailoverSeedTransitionIntegration(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the sentinels' down-after and failover): overlaps the other failovers
	node.EachServerParallel(t, testFailoverSeedTransition)
}

// testFailoverSeedTransition runs the seed's transition (enqueue
// JOB0KHTOWnGLuC on quotes, claim it) through the proxy before a
// failover and again after it, on the promoted node: the replies and the
// keys are the same (lease_epoch is each node's own run_id). The promoted
// node also holds exactly what the first run left.
func testFailoverSeedTransition(t *testing.T, server node.Server) {
	m := LoadMap(t)
	h, srv, addr := haFront(t, server, m, false)
	path := func(n *node.Node) *Path {
		c := n.Client(t)
		id, err := RunID(testCtx(t), c)
		if err != nil {
			t.Fatal(err)
		}
		return &Path{Name: ProxyPath, Addr: addr, Node: n, Direct: c, Map: m, RunID: id, Proxy: srv}
	}
	before := NewTranscript(t, testCtx(t), path(h.Primary))
	seedTransition(t, before)
	before.Finish()
	left := before.Checkpoints()[len(before.Checkpoints())-1].Keys
	if got, err := node.RawDo(h.Primary.Addr, "WAIT", "1", "5000"); err != nil || string(got) != ":1\r\n" {
		t.Fatalf("WAIT 1 on the primary: %q, %v", got, err)
	}

	promoted, _, _ := killAndResume(t, h, addr, nil)
	after := NewTranscript(t, testCtx(t), path(promoted))
	kept, err := ReadKeys(testCtx(t), after.Path.Direct)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(kept, left, func(a, b Key) bool { return a.String() == b.String() }) {
		t.Fatalf("the promoted node holds %v, the first run left %v", kept, left)
	}
	for _, k := range kept.Names() {
		if err := after.Path.Direct.Do(testCtx(t), after.Path.Direct.B().Del().Key(k).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	seedTransition(t, after)
	after.Finish()
	noLuaWrites(t, before)
	noLuaWrites(t, after)
	if diffs := Compare(before, after); len(diffs) > 0 {
		t.Fatal(FormatDiffs("before the failover", "after it", diffs))
	}
}

func TestFailoverTwiceAckIntegration(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the sentinels' down-after and failover): overlaps the other failovers
	node.EachServerParallel(t, testFailoverTwiceAck)
}

// testFailoverTwiceAck: with ack_replicas 1, the primary is SIGKILLed,
// the replica promoted, the killed node restarted as its replica; once the
// set is whole again the sentinels fail over a second time, back to the
// restarted node, in one of three ways:
//
//   - forced: once enqueues are acknowledged again, SENTINEL FAILOVER (the
//     old primary demoted alive, some seconds after the switch);
//   - frozen at once: as soon as the set is whole, the primary is stopped
//     (SIGSTOP) until the sentinels promoted the other node, past the
//     proxy's reply timeout, then let go on (a stale primary);
//   - stalled at once: as soon as the set is whole, the primary is stopped
//     only until a sentinel begins the failover (a little over
//     down-after, as on a loaded machine), so the proxy's connections to
//     it outlive the stop and the sentinels promote the other node behind
//     them.
//
// "stalled at once", the nearest to a failure once seen on a loaded
// machine, runs on both servers; each of the other two on one of them
// (their sentinels are the servers' own, the proxy's path the same), which
// keeps the test to four failovers in the suite's two legs.
//
// Enqueues through the proxy are acknowledged again within failover_wait
// plus two WAITs of the set being whole with the new primary (a write
// waits at most failover_wait for the new primary, and at most two WAITs
// on its connection: ack.go), no call outlives that plus a second, and
// every acknowledged enqueue is on the last primary exactly once.
func testFailoverTwiceAck(t *testing.T, server node.Server) {
	hows := map[string][]string{"redis": {"forced", "stalled at once"}, "valkey": {"frozen at once", "stalled at once"}}[server.Kind]
	for _, how := range hows {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			m := LoadMap(t)
			h, _, addr := haFront(t, server, m, true)
			l := startLoadBackoff(t, m, addr, "failover2", 10*time.Millisecond)
			l.waitCalls(t, 300)
			first, _, _ := killAndResume(t, h, addr, nil)
			l.waitCalls(t, 100)
			if err := h.Rejoin(h.Primary, node.Options{Role: node.Module, Server: server.Path, ReplicaOf: first.Addr}, haWait); err != nil {
				t.Fatal(err)
			}
			master, err := h.WaitWhole(haWait)
			if err != nil {
				t.Fatal(err)
			}
			bound := failoverWait + 2*ackTimeout
			if how == "forced" {
				reacked(t, l, "after the first failover", bound)
			}
			// The second failover, to the other node, whichever the first
			// left as master (a loaded machine may have failed over once
			// more already).
			target := h.Primary
			if master == h.Primary {
				target = h.Replica
			}
			began := time.Now()
			switch how {
			case "forced":
				failover(t, h)
			case "stalled at once":
				stall(t, h, master)
			default:
				if err := master.Freeze(); err != nil {
					t.Fatal(err)
				}
				err := h.WaitNamed(target, haWait)
				if terr := master.Thaw(); terr != nil {
					t.Fatal(terr)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if how != "frozen at once" { // (which waited for it above)
				if err := h.WaitNamed(target, haWait); err != nil {
					t.Fatal(err)
				}
			}
			// The set whole again. A loaded machine may have failed over
			// once more since (down-after is a second on the stand): the
			// last primary is the whole set's master, whichever node.
			last, err := h.WaitWhole(haWait)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the sentinels failed over to %s; the set was whole %v after the second failover began",
				server.Name, target.Addr, time.Since(began).Round(time.Millisecond))
			if last != target {
				t.Logf("%s: the sentinels failed over once more, to %s", server.Name, last.Addr)
			}
			after := reacked(t, l, "after the second failover", bound)
			t.Logf("%s: an enqueue was acknowledged again %v after the set was whole", server.Name, after.Round(time.Millisecond))
			l.waitCalls(t, 300)
			l.finish()
			loadInvariants(t, l, failoverWait+time.Second+2*ackTimeout)
			once, missing := acknowledged(t, l, last)
			t.Logf("%s: %d acknowledged enqueues on the last primary exactly once, %d lost", server.Name, once, missing)
			if missing > 0 {
				t.Errorf("%d acknowledged enqueues lost with ack_replicas 1", missing)
			}
		})
	}
}

// reacked waits until the load has 100 more acknowledged enqueues, and
// fails the test when the first of them comes later than bound; it
// returns how long the first one took.
func reacked(t *testing.T, l *load, when string, bound time.Duration) time.Duration {
	t.Helper()
	count := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.acked)
	}
	start, acked := time.Now(), count()
	ctx, cancel := context.WithTimeout(testCtx(t), bound)
	defer cancel()
	if err := WaitFor(ctx, func() bool { return count() > acked }); err != nil {
		l.mu.Lock()
		texts := maps.Clone(l.errTexts)
		l.mu.Unlock()
		t.Fatalf("no enqueue acknowledged within %v %s (errors so far: %v)", bound, when, texts)
	}
	first := time.Since(start)
	if err := WaitFor(testCtx(t), func() bool { return count() >= acked+100 }); err != nil {
		t.Fatalf("fewer than 100 enqueues acknowledged %s", when)
	}
	return first
}

// failover has a sentinel fail the master set over (SENTINEL FAILOVER),
// asking again while it has no replica fit to promote yet or another
// failover is under way.
func failover(t *testing.T, h *node.HA) {
	t.Helper()
	deadline := time.Now().Add(haWait)
	for {
		r, err := node.RawDo(h.Sentinels[0].Addr, "SENTINEL", "FAILOVER", h.Master)
		if err != nil {
			t.Fatal(err)
		}
		if string(r) == "+OK\r\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER %s: %q", h.Master, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stall stops master (SIGSTOP) until a sentinel has begun a failover of
// it, and lets it go on at once (SIGCONT): a primary that stopped
// answering for a little over the sentinels' down-after, as on a loaded
// machine, and whose connections outlive the stop.
func stall(t *testing.T, h *node.HA, master *node.Node) {
	t.Helper()
	if err := master.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := master.Thaw(); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(haWait)
	for time.Now().Before(deadline) {
		for _, s := range h.Sentinels {
			r, err := node.RawDo(s.Addr, "SENTINEL", "MASTER", h.Master)
			if err == nil && strings.Contains(string(r), "failover_in_progress") {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no sentinel began a failover of %s", master.Addr)
}
