package proxy

import (
	"strconv"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// expectedAuthDelay is the least the k-th failure (1-based) of an address
// waits, by the documented schedule.
func expectedAuthDelay(k int, base, ceiling time.Duration) time.Duration {
	if k <= limits.FreeAuthFailures {
		return 0
	}
	return min(base<<min(k-limits.FreeAuthFailures-1, 16), ceiling)
}

func TestAuthGuessingAcrossConnections(t *testing.T) {
	node.EachServer(t, testAuthGuessingAcrossConnections)
}

// Thirty wrong AUTHs, each on a fresh connection from 127.0.0.1, are
// delayed by the address's count (a reconnecting client does not start
// again): together they take at least the sum of their delays, and the
// proxy reports at least that much delay applied. A correct AUTH right
// after, on another connection, is not delayed.
func testAuthGuessingAcrossConnections(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	const base, ceiling = 2 * time.Millisecond, 20 * time.Millisecond
	h := startProxy(t, n, func(o *Options) {
		o.Policy.Users = map[string]string{"default": "right"}
		o.AuthFailDelay, o.MaxAuthFailDelay = base, ceiling
	})
	right := h.dial() // connected before the guesses, authenticates after
	var want time.Duration
	began := time.Now()
	for k := 1; k <= 30; k++ {
		c := h.dial()
		c.do("AUTH", "guess-"+strconv.Itoa(k)).is("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
		_ = c.nc.Close()
		want += expectedAuthDelay(k, base, ceiling)
	}
	took := time.Since(began)
	delayed := readCounter(t, h.srv.fails.Delays)
	t.Logf("30 failed AUTHs on fresh connections took %v; delay applied %.3fs; the schedule's sum %v", took, delayed, want)
	if took < want {
		t.Errorf("30 failed AUTHs took %v, less than the sum of their delays %v", took, want)
	}
	if delayed < want.Seconds() {
		t.Errorf("the proxy reports %.3fs of delay applied, want at least %v", delayed, want)
	}
	right.do("AUTH", "right").is("+OK\r\n")
	right.do("HELLO", "2", "AUTH", "default", "right").hasPrefix("*")
	if got := readCounter(t, h.srv.fails.Delays); got != delayed {
		t.Errorf("a correct AUTH was delayed: the delay applied went from %.3fs to %.3fs", delayed, got)
	}
	right.do("SET", "k", "v").is("+OK\r\n")
	// HELLO AUTH failures count for the same address too.
	e := h.dial()
	e.do("HELLO", "2", "AUTH", "default", "nope").hasPrefix("-WRONGPASS ")
	if got := readCounter(t, h.srv.fails.Delays); got < delayed+ceiling.Seconds() {
		t.Errorf("a failed HELLO AUTH after 30 failures was delayed %.3fs, want at least %v", got-delayed, ceiling)
	}
}

func TestAuthTimeout(t *testing.T) { node.EachServer(t, testAuthTimeout) }

// With users configured, a connection that has not authenticated within
// the timeout is closed, whether it is idle or keeps sending; one that
// authenticated stays. A guess whose delay outlasts the timeout is never
// answered: the connection is closed first.
func testAuthTimeout(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	const timeout = 300 * time.Millisecond
	h := startProxy(t, n, func(o *Options) {
		o.Policy.Users = map[string]string{"default": "right"}
		o.AuthTimeout = timeout
		o.AuthFailDelay, o.MaxAuthFailDelay = 5*time.Second, 5*time.Second
	})
	authed := h.dial()
	authed.do("AUTH", "right").is("+OK\r\n")
	began := time.Now()
	idle := h.dial()
	busy := h.dial()
	busy.do("PING").hasPrefix("-NOAUTH ")
	idle.closed()
	if took := time.Since(began); took < timeout {
		t.Errorf("the idle connection was closed after %v, before the timeout %v", took, timeout)
	}
	for {
		busy.send(cmd("PING"))
		if _, err := resp.ReadReply(busy.br); err != nil {
			break // closed at its deadline
		}
	}
	if got := readCounter(t, h.srv.met.Rejected.WithLabelValues("auth_timeout")); got != 2 {
		t.Errorf("auth_timeout closes counted %v, want 2", got)
	}
	authed.do("PING").is("+PONG\r\n")

	// Spend the address's free failures, then guess once more: its reply
	// would wait 5s, the connection has 300ms.
	for range limits.FreeAuthFailures {
		h.dial().do("AUTH", "wrong").hasPrefix("-WRONGPASS ")
	}
	g := h.dial()
	began = time.Now()
	g.send(cmd("AUTH", "wrong"))
	g.closed()
	if took := time.Since(began); took < timeout/2 {
		t.Errorf("the delayed guess's connection closed after %v", took)
	}
	authed.do("PING").is("+PONG\r\n")
}
