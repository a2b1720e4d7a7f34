package proxy

import (
	"strconv"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// expectedAuthDelay is the least the k-th failure (1-based) of an address
// waits, by the documented schedule.
func expectedAuthDelay(k int, base, ceiling time.Duration) time.Duration {
	if k <= freeAuthFailures {
		return 0
	}
	return min(base<<min(k-freeAuthFailures-1, 16), ceiling)
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
	delayed := readCounter(t, h.srv.fails.delayed)
	t.Logf("30 failed AUTHs on fresh connections took %v; delay applied %.3fs; the schedule's sum %v", took, delayed, want)
	if took < want {
		t.Errorf("30 failed AUTHs took %v, less than the sum of their delays %v", took, want)
	}
	if delayed < want.Seconds() {
		t.Errorf("the proxy reports %.3fs of delay applied, want at least %v", delayed, want)
	}
	right.do("AUTH", "right").is("+OK\r\n")
	right.do("HELLO", "2", "AUTH", "default", "right").hasPrefix("*")
	if got := readCounter(t, h.srv.fails.delayed); got != delayed {
		t.Errorf("a correct AUTH was delayed: the delay applied went from %.3fs to %.3fs", delayed, got)
	}
	right.do("SET", "k", "v").is("+OK\r\n")
	// HELLO AUTH failures count for the same address too.
	e := h.dial()
	e.do("HELLO", "2", "AUTH", "default", "nope").hasPrefix("-WRONGPASS ")
	if got := readCounter(t, h.srv.fails.delayed); got < delayed+ceiling.Seconds() {
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
		if _, err := node.ReadReply(busy.br); err != nil {
			break // closed at its deadline
		}
	}
	if got := readCounter(t, h.srv.met.rejected.WithLabelValues("auth_timeout")); got != 2 {
		t.Errorf("auth_timeout closes counted %v, want 2", got)
	}
	authed.do("PING").is("+PONG\r\n")

	// Spend the address's free failures, then guess once more: its reply
	// would wait 5s, the connection has 300ms.
	for range freeAuthFailures {
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

// The table of addresses decays, serialises an address's delayed replies,
// and stays bounded.
func TestAuthTableDecaysAndStaysBounded(t *testing.T) {
	var tb authTable
	if err := tb.registerMetrics(nil); err != nil {
		t.Fatal(err)
	}
	const base, ceiling = 100 * time.Millisecond, 2 * time.Second
	t0 := time.Unix(1_000_000, 0)
	for k := 1; k <= 6; k++ {
		if got, want := tb.failed("10.0.0.1", t0, base, ceiling), expectedAuthDelay(k, base, ceiling); got < want {
			t.Errorf("failure %d waits %v, want %v", k, got, want)
		}
	}
	// Failures 4, 5 and 6 arrived at once: their replies go one after the
	// other (100ms, +200ms, +400ms).
	if got := tb.failed("10.0.0.1", t0, base, ceiling); got != (100+200+400+800)*time.Millisecond {
		t.Errorf("a seventh failure at the same instant waits %v, want 1.5s (after the others)", got)
	}
	// Another address is counted on its own.
	if got := tb.failed("10.0.0.2", t0, base, ceiling); got != 0 {
		t.Errorf("another address's first failure waits %v", got)
	}
	// Three half-lives later the count (7) is down to 0: free again.
	later := t0.Add(3*authFailHalfLife + 10*time.Second)
	if got := tb.failed("10.0.0.1", later, base, ceiling); got != 0 {
		t.Errorf("after three half-lives a failure waits %v, want none", got)
	}
	for i := range 2 * maxAuthAddrs {
		tb.failed("192.0.2."+strconv.Itoa(i), later.Add(time.Duration(i)), base, ceiling)
	}
	if len(tb.addrs) > maxAuthAddrs {
		t.Errorf("the table holds %d addresses, more than %d", len(tb.addrs), maxAuthAddrs)
	}
	if _, ok := tb.addrs["192.0.2."+strconv.Itoa(2*maxAuthAddrs-1)]; !ok {
		t.Error("the newest address was not kept")
	}
	if sourceHost("127.0.0.1:5555") != "127.0.0.1" || sourceHost("[::1]:5555") != "::1" {
		t.Error("sourceHost does not take the IP of host:port")
	}
}
