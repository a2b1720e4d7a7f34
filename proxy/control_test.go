package proxy

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// startControlled is startRouted (billing* on scripts-b, the rest on
// module-a) with the control table on: poll 50ms, lease 400ms, hold 600ms.
func startControlled(t *testing.T) *routed { return startControlledOn(t, "") }

// startControlledOn is startControlled on the server binary server.
func startControlledOn(t *testing.T, server string) *routed {
	t.Helper()
	return startControlledWith(t, server, Hooks{})
}

// startControlledWith is startControlledOn with the sessions' hooks h.
func startControlledWith(t *testing.T, server string, h Hooks) *routed {
	t.Helper()
	r := startRoutedOn(t, server, func(o *Options) {
		o.Control = &ControlOptions{Poll: 50 * time.Millisecond, Lease: 400 * time.Millisecond, Hold: 600 * time.Millisecond, ID: "p1"}
		o.Hooks = h
	})
	r.waitApplied(t, r.scripts, 0)
	return r
}

// startHooked is startControlled with the sessions' hooks h, which do
// nothing until the test calls arm: the proxy is given its hooks when it
// is made, and a test turns them on once its own setup went through (and
// the proxy it returns is set where the hooks read it).
func startHooked(t *testing.T, h Hooks) (r *routed, arm func()) {
	t.Helper()
	var on atomic.Bool
	var gated Hooks
	if f := h.BeforeSend; f != nil {
		gated.BeforeSend = func(admitted bool) {
			if on.Load() {
				f(admitted)
			}
		}
	}
	if f := h.AfterSendCheck; f != nil {
		gated.AfterSendCheck = func() {
			if on.Load() {
				f()
			}
		}
	}
	if f := h.BeforeResend; f != nil {
		gated.BeforeResend = func() {
			if on.Load() {
				f()
			}
		}
	}
	return startControlledWith(t, "", gated), func() { on.Store(true) }
}

// waitApplied waits until the proxy acknowledged epoch on n.
func (r *routed) waitApplied(t *testing.T, n *node.Node, epoch int) {
	t.Helper()
	want := `"applied":` + strconv.Itoa(epoch) + `,`
	poll(t, "acknowledgement of epoch "+strconv.Itoa(epoch), func() bool {
		return strings.Contains(nodeDo(t, n, "HGET", "{emqproxy}:proxies", "p1"), want) &&
			nodeDo(t, n, "EXISTS", "{emqproxy}:lease:p1") == ":1\r\n"
	})
}

// timed runs one command through c and returns its reply and duration.
func timed(c *client, args ...string) (reply, time.Duration) {
	t0 := time.Now()
	r := c.do(args...)
	return r, time.Since(t0)
}

// TestHeldQueueWaitsThenGetsTryAgain: a queue held in a node's table holds
// its commands, for at most the hold, then refuses them with nothing sent;
// other queues pass; a flip releases held commands to the new owner.
func TestHeldQueueWaitsThenGetsTryAgain(t *testing.T) {
	r := startControlled(t)
	c := r.dial()
	c.do("SET", "emq:{billing}:x", "before").is("+OK\r\n")
	nodeDo(t, r.scripts, "HSET", "{emqproxy}:queues", "billing", "3 held scripts-b")
	nodeDo(t, r.scripts, "SET", "{emqproxy}:epoch", "3")
	r.waitApplied(t, r.scripts, 3)

	rep, took := timed(c, "SET", "emq:{billing}:x", "held")
	rep.is("-TRYAGAIN queue billing is moving\r\n")
	if took < 550*time.Millisecond || took > 2*time.Second {
		t.Errorf("held for %v, want about the hold (600ms)", took)
	}
	if got := nodeDo(t, r.scripts, "GET", "emq:{billing}:x"); got != "$6\r\nbefore\r\n" {
		t.Errorf("the refused SET reached the node: %q", got)
	}
	rep, took = timed(c, "SET", "emq:{quotes}:x", "1")
	rep.is("+OK\r\n")
	if took > 500*time.Millisecond {
		t.Errorf("another queue waited %v", took)
	}

	// Released by the flip, to the new owner.
	go func() {
		time.Sleep(200 * time.Millisecond)
		nodeDo(t, r.module, "HSET", "{emqproxy}:queues", "billing", "4 owned module-a")
		nodeDo(t, r.module, "SET", "{emqproxy}:epoch", "4")
		nodeDo(t, r.scripts, "HSET", "{emqproxy}:queues", "billing", "4 owned module-a")
		nodeDo(t, r.scripts, "SET", "{emqproxy}:epoch", "4")
	}()
	rep, took = timed(c, "SET", "emq:{billing}:x", "after")
	rep.is("+OK\r\n")
	if took < 150*time.Millisecond {
		t.Errorf("released after %v, before the flip", took)
	}
	if got := nodeDo(t, r.module, "GET", "emq:{billing}:x"); got != "$5\r\nafter\r\n" {
		t.Errorf("module-a has %q", got)
	}
	if got := nodeDo(t, r.scripts, "GET", "emq:{billing}:x"); got != "$6\r\nbefore\r\n" {
		t.Errorf("scripts-b has %q", got)
	}
	// billing2 still follows the file's route.
	c.do("SET", "emq:{billing2}:x", "1").is("+OK\r\n")
	if got := nodeDo(t, r.scripts, "EXISTS", "emq:{billing2}:x"); got != ":1\r\n" {
		t.Errorf("billing2 left its route: %q", got)
	}
	// A reload keeps the moved queue's owner.
	if err := r.srv.SwapRoutes([]Route{{Queues: []string{"billing*"}, Upstream: "scripts-b"}, {Queues: []string{"*"}, Upstream: "module-a"}}); err != nil {
		t.Fatal(err)
	}
	if got := r.srv.RouteFor("billing"); got != "module-a" {
		t.Errorf("after a reload billing routes to %s", got)
	}
}

// TestLapsedLeaseHoldsThatNodesQueues: a proxy that cannot renew its lease
// on a node holds the commands for the queues routed there.
func TestLapsedLeaseHoldsThatNodesQueues(t *testing.T) {
	r := startControlled(t)
	c := r.dial()
	if err := r.scripts.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = r.scripts.Thaw()
		}
	}
	defer thaw()
	time.Sleep(500 * time.Millisecond) // past the lease
	rep, _ := timed(c, "SET", "emq:{billing}:x", "1")
	rep.is("-TRYAGAIN queue billing has no lease on upstream scripts-b\r\n")
	rep, took := timed(c, "SET", "emq:{quotes}:x", "1")
	rep.is("+OK\r\n")
	if took > 500*time.Millisecond {
		t.Errorf("a queue on the other node waited %v", took)
	}
	thaw()
	r.waitApplied(t, r.scripts, 0)
	c.do("SET", "emq:{billing}:x", "2").is("+OK\r\n")
}

// TestHeldQueueHoldsAnEarlierQueuedTransaction: a transaction queued before
// its queue was held is admitted at EXEC, when it is sent: held, then
// TRYAGAIN, and nothing of it reaches the node.
func TestHeldQueueHoldsAnEarlierQueuedTransaction(t *testing.T) {
	r := startControlled(t)
	c := r.dial()
	c.do("SET", "emq:{billing}:x", "before").is("+OK\r\n")
	c.do("MULTI").is("+OK\r\n")
	c.do("SET", "emq:{billing}:x", "in-tx").is("+QUEUED\r\n")
	nodeDo(t, r.scripts, "HSET", "{emqproxy}:queues", "billing", "3 held scripts-b")
	nodeDo(t, r.scripts, "SET", "{emqproxy}:epoch", "3")
	r.waitApplied(t, r.scripts, 3)
	rep, took := timed(c, "EXEC")
	rep.is("-TRYAGAIN queue billing is moving\r\n")
	if took < 550*time.Millisecond {
		t.Errorf("EXEC answered after %v, without waiting for the hold", took)
	}
	if got := nodeDo(t, r.scripts, "GET", "emq:{billing}:x"); got != "$6\r\nbefore\r\n" {
		t.Errorf("the held transaction reached the node: %q", got)
	}
}

// A proxy paused between admitting a command and sending it (SIGSTOP, a
// stalled VM), long enough for its lease to lapse, does not send it when it
// wakes: a mover may have waited the lease out and moved the queue. The
// pause is made here by stopping the control loop and lapsing the lease
// while the session is about to send; the command gets TRYAGAIN and never
// reaches the node.
func TestLeaseLapsedBeforeTheSendSendsNothing(t *testing.T) {
	var r *routed
	var once sync.Once
	r, arm := startHooked(t, Hooks{BeforeSend: func(admitted bool) {
		if !admitted {
			return
		}
		once.Do(func() {
			ctl := r.srv.ctl
			ctl.cancel() // the proxy "paused": no renewal while it sleeps
			ctl.wg.Wait()
			for _, n := range ctl.nodes {
				n.valid.Store(1) // and its leases lapsed meanwhile
			}
		})
	}})
	c := r.dial()
	c.do("SET", "emq:{quotes}:x", "before").is("+OK\r\n")
	arm()
	c.do("SET", "emq:{quotes}:x", "after").is("-TRYAGAIN emqproxy's lease on upstream module-a lapsed before the command was sent; nothing was sent\r\n")
	if got := nodeDo(t, r.module, "GET", "emq:{quotes}:x"); got != "$6\r\nbefore\r\n" {
		t.Errorf("the command reached the node after the lease lapsed: %q", got)
	}
}
