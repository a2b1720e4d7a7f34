package proxy

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/stand/node"
)

// killDataConns closes on n every connection named as the data
// connections of the proxy p1 (CLIENT LIST, CLIENT KILL ID), as a mover
// does for a proxy it waited out (package control's latewriters.go), and
// returns how many it closed.
func killDataConns(n *node.Node) (int, error) {
	b, err := node.RawDo(n.Addr, "CLIENT", "LIST", "TYPE", "normal")
	if err != nil {
		return 0, err
	}
	killed := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(line, " name="+table.DataClientName("p1")+" ") {
			continue
		}
		for f := range strings.FieldsSeq(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				if _, err := node.RawDo(n.Addr, "CLIENT", "KILL", "ID", id); err != nil {
					return killed, err
				}
				killed++
			}
		}
	}
	return killed, nil
}

// stopLoop stops r's control loop, as a paused process's, and sets every
// lease valid until valid from now (negative: lapsed).
func stopLoop(r *routed, valid time.Duration) {
	ctl := r.srv.ctl
	ctl.cancel()
	ctl.wg.Wait()
	for _, n := range ctl.nodes {
		n.valid.Store(int64(time.Since(ctl.start) + valid))
	}
}

// TestTableChangedBeforeTheSendSendsNothing: a command admitted under one
// table is not sent when, before its send, the table in force changed its
// queue (held here): the control loop installs tables without waiting for
// the commands in flight, so the send-time check refuses it, with nothing
// sent.
func TestTableChangedBeforeTheSendSendsNothing(t *testing.T) {
	var r *routed
	var once sync.Once
	var hookErr error
	r, arm := startHooked(t, Hooks{BeforeSend: func(admitted bool) {
		if !admitted {
			return
		}
		once.Do(func() {
			ctl := r.srv.ctl
			for _, args := range [][]string{{"HSET", "{emqproxy}:queues", "quotes", "5 held module-a"}, {"SET", "{emqproxy}:epoch", "5"}} {
				if _, err := node.RawDo(r.module.Addr, args...); err != nil {
					hookErr = err
					return
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for !ctl.Current().Held["quotes"] && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if !ctl.Current().Held["quotes"] {
				hookErr = errNotApplied
			}
		})
	}})
	c := r.dial()
	c.do("SET", "emq:{quotes}:x", "before").is("+OK\r\n")
	arm()
	c.do("SET", "emq:{quotes}:x", "after").is("-TRYAGAIN emqproxy's control table changed for the command's queue before it was sent; nothing was sent\r\n")
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if got := nodeDo(t, r.module, "GET", "emq:{quotes}:x"); got != "$6\r\nbefore\r\n" {
		t.Errorf("the command reached the node after its queue was held: %q", got)
	}
	// The hold is acknowledged once the refused command is done.
	r.waitApplied(t, r.module, 5)
}

var errNotApplied = errorString("the hold was not applied within 5s")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestResendChecksTheLeaseAgain: a command whose connection was closed by
// the server before its send (as a mover closes a waited-out proxy's) is
// resent on a new connection only after the send-time check passes again:
// with the lease lapsed meanwhile it gets TRYAGAIN and nothing is written,
// on either connection. The data connections are found by their name.
func TestResendChecksTheLeaseAgain(t *testing.T) {
	var r *routed
	var armed, resent atomic.Int32
	var killed int
	var hookErr error
	r, arm := startHooked(t, Hooks{BeforeSend: func(admitted bool) {
		if !admitted || !armed.CompareAndSwap(1, 0) {
			return
		}
		// The send finds the connection closed while idle, unless the
		// upstream's own watch (every 100ms) found it first: then the
		// client gets the unavailable error and the test tries again.
		killed, hookErr = killDataConns(r.module)
		time.Sleep(time.Millisecond)
	}, BeforeResend: func() {
		resent.Add(1)
		stopLoop(r, -time.Second) // the wait for the new connection outlasted the lease
	}})
	c := r.dial()
	c.do("SET", "emq:{quotes}:x", "before").is("+OK\r\n")
	arm()
	for range 10 {
		armed.Store(1)
		rep := c.do("SET", "emq:{quotes}:x", "after")
		if hookErr != nil || killed == 0 {
			t.Fatalf("closing the proxy's data connections on module-a: %d closed, %v", killed, hookErr)
		}
		if resent.Load() == 0 {
			rep.is("-UPSTREAM module-a unavailable: not connected\r\n")
			if got := nodeDo(t, r.module, "GET", "emq:{quotes}:x"); got != "$6\r\nbefore\r\n" {
				t.Fatalf("a command answered unavailable reached the node: %q", got)
			}
			time.Sleep(200 * time.Millisecond) // a new connection
			continue
		}
		rep.is("-TRYAGAIN emqproxy's lease on upstream module-a lapsed before the command was sent; nothing was sent\r\n")
		if n := resent.Load(); n != 1 {
			t.Errorf("the command was resent %d times after its connection closed; want 1", n)
		}
		if got := nodeDo(t, r.module, "GET", "emq:{quotes}:x"); got != "$6\r\nbefore\r\n" {
			t.Errorf("the command reached the node after the lease lapsed: %q", got)
		}
		return
	}
	t.Fatal("no send found its connection closed in 10 tries: the resend was never tried")
}

// TestNewConnectionReadingANewerTableLapsesTheLease: a proxy that missed a
// hold (its loop stopped, its lease still valid by its own clock: a node
// clock stepped forward, say) does not write to the held queue on a
// connection opened after the mover closed its connections: the new
// connection read the node's epoch, which the proxy never applied, so its
// lease on the node is lapsed at once and the command gets TRYAGAIN with
// nothing written.
func TestNewConnectionReadingANewerTableLapsesTheLease(t *testing.T) {
	r := startControlled(t)
	c := r.dial()
	c.do("SET", "emq:{billing}:x", "before").is("+OK\r\n")
	stopLoop(r, time.Minute)
	nodeDo(t, r.scripts, "HSET", "{emqproxy}:queues", "billing", "7 held scripts-b")
	nodeDo(t, r.scripts, "SET", "{emqproxy}:epoch", "7")
	if n, err := killDataConns(r.scripts); err != nil || n == 0 {
		t.Fatalf("closing the proxy's data connections on scripts-b: %d closed, %v", n, err)
	}
	// The proxy reconnects, and the new connection reads the epoch it did
	// not apply, which lapses the lease. A command sent before the proxy
	// saw the close (50 ms were not always enough under load) would get
	// the lost connection's error instead.
	sb := r.srv.ctl.byName["scripts-b"]
	poll(t, "a new connection to scripts-b lapsing the lease", func() bool {
		return r.srv.ctl.leaseLeft(sb, time.Now()) <= 0
	})
	rep := c.do("SET", "emq:{billing}:x", "late")
	if !strings.HasPrefix(string(rep.got), "-TRYAGAIN ") {
		t.Errorf("a write on a new connection to a node whose table the proxy did not apply: %q; want TRYAGAIN", rep.got)
	}
	if got := nodeDo(t, r.scripts, "GET", "emq:{billing}:x"); got != "$6\r\nbefore\r\n" {
		t.Errorf("the late write reached the held queue's source: %q", got)
	}
}

// TestSessionFrozenBetweenItsCheckAndItsWrite: a session that passed its
// send-time check, then froze past its lease while a mover held its
// queue, waited the proxy out and closed its data connections on the
// source, does not write when it wakes: its connection is closed, and the
// resend on a new one is checked again (the lease lapsed). The client gets
// an error and the held queue's source never runs the write.
func TestSessionFrozenBetweenItsCheckAndItsWrite(t *testing.T) {
	var r *routed
	var once sync.Once
	var killed int
	var hookErr error
	r, arm := startHooked(t, Hooks{AfterSendCheck: func() {
		once.Do(func() {
			// Frozen: no renewal, the lease lapses; the mover holds the
			// queue, waits the proxy out and closes its connections.
			stopLoop(r, -time.Second)
			for _, args := range [][]string{{"HSET", "{emqproxy}:queues", "billing", "9 held scripts-b"}, {"SET", "{emqproxy}:epoch", "9"}} {
				if _, err := node.RawDo(r.scripts.Addr, args...); err != nil {
					hookErr = err
					return
				}
			}
			killed, hookErr = killDataConns(r.scripts)
			time.Sleep(10 * time.Millisecond) // the close reaches the proxy
		})
	}})
	c := r.dial()
	c.do("SET", "emq:{billing}:x", "before").is("+OK\r\n")
	arm()
	rep := c.do("SET", "emq:{billing}:x", "late")
	if hookErr != nil || killed == 0 {
		t.Fatalf("closing the proxy's data connections on scripts-b: %d closed, %v", killed, hookErr)
	}
	if !strings.HasPrefix(string(rep.got), "-") {
		t.Errorf("the frozen session's write was answered %q; want an error", rep.got)
	}
	if got := nodeDo(t, r.scripts, "GET", "emq:{billing}:x"); got != "$6\r\nbefore\r\n" {
		t.Errorf("the frozen session's write reached the held queue's source: %q", got)
	}
}
