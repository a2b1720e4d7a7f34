package limits

import (
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Failed authentications by source address.
//
// Failed AUTHs (and HELLO ... AUTH) are counted per source address, across
// connections, in an AuthTable: a client that reconnects goes on
// where it was. The first FreeAuthFailures failures of an address
// are answered at once, as the server answers them (a client with a stale
// password retrying a few times is not slowed). Each further failure's
// WRONGPASS is delayed: the base delay (the proxy's AuthFailDelay), then
// twice that, and so on, up to the ceiling (MaxAuthFailDelay); and an address's delayed replies are released one
// after the other, so guesses made on many connections at once wait in
// line (an address gets at most one delayed answer per delay, however many
// connections it opens). The count halves for every minute without a
// failure, so an address that stops guessing is answered at once again
// after a few minutes. A correct AUTH is never delayed and does not reset
// the count (behind a sidecar every client shares 127.0.0.1: one client's
// success must not wipe another's guesses). The table holds at most 4096
// addresses: a full table first forgets the addresses whose count has
// decayed to nothing, then those whose last failure is oldest. The address
// is the IP the connection comes from (every port of a host is one
// address: SourceHost).
//
// The table's constants (the limits themselves are the caller's).
const (
	// FreeAuthFailures are the failures of an address answered without
	// delay.
	FreeAuthFailures = 3
	// authFailHalfLife is how long without a failure halves an address's count.
	authFailHalfLife = time.Minute
	// maxAuthAddrs bounds the table of addresses.
	maxAuthAddrs = 4096
)

// AuthTable counts failed authentications by source address, and says
// how long the reply to each one waits (see above). Its zero
// value is an empty table without metrics (RegisterMetrics makes them);
// its methods are safe for concurrent use.
type AuthTable struct {
	mu    sync.Mutex
	addrs map[string]*authAddr

	// Delays counts the seconds of delay applied to failed
	// authentications' replies (emqproxy_auth_fail_delay_seconds_total);
	// made by RegisterMetrics.
	Delays prometheus.Counter
}

// authAddr is one address's failures.
type authAddr struct {
	fails int       // failures, decayed
	last  time.Time // the last failure
	next  time.Time // when the address's next delayed reply may go
}

// decay halves a's count for every half-life since its last failure.
func (a *authAddr) decay(now time.Time) {
	if steps := now.Sub(a.last) / authFailHalfLife; steps > 0 {
		a.fails >>= min(int(steps), 62)
	}
}

// RegisterMetrics creates the table's metrics and registers them on reg
// (when not nil).
func (t *AuthTable) RegisterMetrics(reg prometheus.Registerer) error {
	t.Delays = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "emqproxy_auth_fail_delay_seconds_total",
		Help: "Seconds the replies to failed authentications were delayed, against password guessing.",
	})
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "emqproxy_auth_fail_addresses",
		Help: "Source addresses with failed authentications being counted.",
	}, func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(len(t.addrs))
	})
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{t.Delays, size} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Failed counts a failed authentication from addr at now and returns how
// long its reply waits: nothing for the first FreeAuthFailures, then base,
// doubling per failure up to ceiling, after the address's replies already
// waiting.
func (t *AuthTable) Failed(addr string, now time.Time, base, ceiling time.Duration) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.addrs == nil {
		t.addrs = make(map[string]*authAddr)
	}
	a := t.addrs[addr]
	if a == nil {
		if len(t.addrs) >= maxAuthAddrs {
			t.evictLocked(now)
		}
		a = &authAddr{}
		t.addrs[addr] = a
	}
	a.decay(now)
	a.fails++
	a.last = now
	if a.fails <= FreeAuthFailures {
		return 0
	}
	d := min(base<<min(a.fails-FreeAuthFailures-1, 16), ceiling)
	release := now
	if a.next.After(release) {
		release = a.next
	}
	release = release.Add(d)
	a.next = release
	return release.Sub(now)
}

// evictLocked makes room in a full table: it forgets the addresses whose
// count has decayed to nothing and whose replies are all out, and when
// that is not an eighth of the table, the oldest (by last failure) down to
// seven eighths, so a table kept full by many addresses is scanned once
// per maxAuthAddrs/8 new ones. The caller holds mu.
func (t *AuthTable) evictLocked(now time.Time) {
	for k, a := range t.addrs {
		a.decay(now)
		if a.fails == 0 && !a.next.After(now) {
			delete(t.addrs, k)
		}
	}
	keep := maxAuthAddrs - maxAuthAddrs/8
	if len(t.addrs) <= keep {
		return
	}
	keys := slices.Collect(maps.Keys(t.addrs))
	slices.SortFunc(keys, func(x, y string) int { return t.addrs[x].last.Compare(t.addrs[y].last) })
	for _, k := range keys[:len(keys)-keep] {
		delete(t.addrs, k)
	}
}

// SourceHost is the address failures are counted by: the IP of a
// host:port remote address (the whole string when it is not one).
func SourceHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
