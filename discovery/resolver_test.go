package discovery

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap/zaptest"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Every test here runs against a real stand: a module primary, its
// replica and three sentinels (node.StartHAT), once per server.

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newResolver starts a resolver on the stand's sentinels, closed at cleanup.
func newResolver(t *testing.T, o Options) *Resolver {
	t.Helper()
	r, err := New(o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// waitUntil polls cond until it holds or the timeout passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustRaw(t *testing.T, addr string, args ...string) string {
	t.Helper()
	reply, err := node.RawDo(addr, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return string(reply)
}

func moduleStand(t *testing.T, srv node.Server) *node.HA {
	t.Helper()
	if _, err := node.BuildModule(); err != nil {
		t.Fatalf("module: %v", err)
	}
	return node.StartHAT(t, node.HAOptions{Server: srv.Path, Role: node.Module})
}

func TestResolveIntegration(t *testing.T) {
	node.Long(t)
	node.EachServerParallel(t, testResolve)
}

func testResolve(t *testing.T, srv node.Server) {
	h := moduleStand(t, srv)

	t.Run("finds the primary", func(t *testing.T) {
		r := newResolver(t, Options{Master: h.Master, Addresses: h.SentinelAddrs()})
		got, err := r.Resolve(ctxFor(t, 20*time.Second))
		if err != nil || got != h.Primary.Addr {
			t.Fatalf("Resolve = %q, %v; want the primary %s", got, err, h.Primary.Addr)
		}
		if p, changed := r.Watch(); p != got {
			t.Fatalf("Watch = %q after Resolve %q", p, got)
		} else {
			select {
			case <-changed:
				t.Fatal("change channel closed with no change")
			default:
			}
		}
		waitUntil(t, 20*time.Second, "subscribed on every sentinel", func() bool { return r.Subscribed() == 3 })
		if r.Failovers() != 0 || r.Refusals() != 0 {
			t.Fatalf("failovers %d refusals %d, want 0", r.Failovers(), r.Refusals())
		}
	})

	// The sentinel ACL docs/operations.md gives the proxy's user is enough
	// to ask and to subscribe.
	t.Run("the documented sentinel ACL", func(t *testing.T) {
		rule := []string{"ACL", "SETUSER", "emqproxy", "on", ">spw", "+ping", "+hello", "+auth",
			"+sentinel|get-master-addr-by-name", "+subscribe", "&+switch-master"}
		for _, s := range h.Sentinels {
			if got := mustRaw(t, s.Addr, rule...); got != "+OK\r\n" {
				t.Fatalf("ACL SETUSER on sentinel %s: %q", s.Addr, got)
			}
		}
		r := newResolver(t, Options{Master: h.Master, Addresses: h.SentinelAddrs(), Username: "emqproxy", Password: "spw"})
		if got, err := r.Resolve(ctxFor(t, 20*time.Second)); err != nil || got != h.Primary.Addr {
			t.Fatalf("Resolve = %q, %v; want the primary %s", got, err, h.Primary.Addr)
		}
		waitUntil(t, 20*time.Second, "subscribed on every sentinel", func() bool { return r.Subscribed() == 3 })
	})

	t.Run("a sentinel that does not know the master", func(t *testing.T) {
		r := newResolver(t, Options{Master: "nosuch", Addresses: h.SentinelAddrs()})
		err := resolveUntilAttempted(t, r)
		if !errors.Is(err, ErrNoPrimary) || !errors.Is(err, ErrUnknownMaster) || r.Primary() != "" {
			t.Fatalf("Resolve = %v (primary %q); want ErrNoPrimary wrapping ErrUnknownMaster", err, r.Primary())
		}
	})

	// The sentinels also monitor the replica under another name, as an
	// operator who named the wrong node would make them: each names a
	// node that answers ROLE slave.
	t.Run("refuses a candidate that is not a master", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(h.Replica.Addr)
		for _, s := range h.Sentinels {
			if got := mustRaw(t, s.Addr, "SENTINEL", "MONITOR", "misnamed", host, port, "2"); got != "+OK\r\n" {
				t.Fatalf("SENTINEL MONITOR on %s: %q", s.Addr, got)
			}
		}
		r := newResolver(t, Options{Master: "misnamed", Addresses: h.SentinelAddrs()})
		err := resolveUntilAttempted(t, r)
		if !errors.Is(err, ErrNoPrimary) || !errors.Is(err, ErrNotPrimary) || !strings.Contains(err.Error(), "ROLE slave") {
			t.Fatalf("Resolve = %v; want ErrNoPrimary wrapping ErrNotPrimary (ROLE slave)", err)
		}
		if r.Primary() != "" || r.Refusals() == 0 {
			t.Fatalf("primary %q refusals %d after a refused candidate", r.Primary(), r.Refusals())
		}

		// Resolve keeps asking until its deadline: once the node is
		// made a master, the next attempt confirms it.
		type result struct {
			addr string
			err  error
		}
		done := make(chan result, 1)
		ctx := ctxFor(t, 30*time.Second)
		go func() {
			addr, err := r.Resolve(ctx)
			done <- result{addr, err}
		}()
		before := r.Refusals()
		waitUntil(t, 10*time.Second, "a refusal after Resolve began", func() bool { return r.Refusals() > before })
		if got := mustRaw(t, h.Replica.Addr, "REPLICAOF", "NO", "ONE"); got != "+OK\r\n" {
			t.Fatalf("REPLICAOF NO ONE: %q", got)
		}
		res := <-done
		if res.err != nil || res.addr != h.Replica.Addr {
			t.Fatalf("Resolve = %q, %v; want %s once it is a master", res.addr, res.err, h.Replica.Addr)
		}
	})
}

func TestFollowsFailoverIntegration(t *testing.T) {
	node.Long(t)
	node.EachServerParallel(t, testFollowsFailover)
}

// testFollowsFailover kills the primary and expects the resolver to
// report the promoted replica on its own, from the +switch-master
// messages (the periodic refresh is off and nobody calls Resolve), within
// the time the sentinels took plus one second.
func testFollowsFailover(t *testing.T, srv node.Server) {
	h := moduleStand(t, srv)
	opts := Options{Master: h.Master, Addresses: h.SentinelAddrs(), Refresh: -1}
	r := newResolver(t, opts)
	if got, err := r.Resolve(ctxFor(t, 20*time.Second)); err != nil || got != h.Primary.Addr {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
	waitUntil(t, 20*time.Second, "subscribed on every sentinel", func() bool { return r.Subscribed() == 3 })

	// valkey-go's own Sentinel support, through ClientOption, for the
	// parts that speak as clients.
	co := opts.ClientOption()
	co.DisableCache = true
	client, err := valkey.NewClient(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	if port := serverPort(t, client); port != h.Primary.Port {
		t.Fatalf("ClientOption client on port %d, want the primary's %d", port, h.Primary.Port)
	}
	brand := mustRaw(t, h.Primary.Addr, "GET", node.VersionKey)

	old, changed := r.Watch()
	killed := time.Now()
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	promotedAt := make(chan time.Time, 1)
	promoteErr := make(chan error, 1)
	go func() {
		if _, err := h.WaitPromoted(60 * time.Second); err != nil {
			promoteErr <- err
			return
		}
		promotedAt <- time.Now()
	}()
	var reported time.Time
	select {
	case <-changed:
		reported = time.Now()
	case <-time.After(60 * time.Second):
		t.Fatalf("no change of primary reported within 60s of the SIGKILL")
	}
	var sentinels time.Time
	select {
	case sentinels = <-promotedAt:
	case err := <-promoteErr:
		t.Fatal(err)
	}
	took, lag := sentinels.Sub(killed), reported.Sub(killed)
	t.Logf("%s: sentinels named the promoted replica %v after the SIGKILL; the resolver reported it after %v",
		srv.Name, took.Round(time.Millisecond), lag.Round(time.Millisecond))
	if got := r.Primary(); got == old || got != h.Replica.Addr {
		t.Fatalf("primary %q after the failover, want the replica %s", got, h.Replica.Addr)
	}
	if lag > took+time.Second {
		t.Fatalf("reported %v after the SIGKILL, more than a second after the sentinels (%v)", lag, took)
	}
	if r.Failovers() != 1 {
		t.Fatalf("Failovers() = %d, want 1", r.Failovers())
	}

	// The brand replicated: the promoted node passes the wire-6 fence
	// without being branded again.
	if got := mustRaw(t, h.Replica.Addr, "GET", node.VersionKey); got != brand {
		t.Fatalf("promoted node brand %q, want the old primary's %q", got, brand)
	}
	m, err := shamap.Load(filepath.Join("..", "stand", "map.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	promoted := h.Replica.Client(t)
	if _, err := fence.CheckModule(ctxFor(t, 10*time.Second), fence.FromValkey(promoted), m, false); err != nil {
		t.Fatalf("wire-6 fence on the promoted node: %v", err)
	}

	waitUntil(t, 30*time.Second, "the ClientOption client reaches the promoted node", func() bool {
		return serverPortOrZero(client) == h.Replica.Port
	})
}

func TestResolveOnDemandIntegration(t *testing.T) {
	node.Long(t)
	node.EachServerParallel(t, testResolveOnDemand)
}

// testResolveOnDemand follows a failover with no +switch-master message at
// all: the sentinels' ACL denies the resolvers' user every channel, so
// their subscriptions fail; only asking again finds the new primary. Four
// resolvers: one asked during the failover, two left alone until it is
// over (their periodic refresh off), one that only refreshes.
func testResolveOnDemand(t *testing.T, srv node.Server) {
	h := moduleStand(t, srv)
	for _, s := range h.Sentinels {
		if got := mustRaw(t, s.Addr, "ACL", "SETUSER", "discover", "on", ">dpw", "+@all", "resetchannels"); got != "+OK\r\n" {
			t.Fatalf("ACL SETUSER on sentinel %s: %q", s.Addr, got)
		}
	}
	opts := Options{Master: h.Master, Addresses: h.SentinelAddrs(), Username: "discover", Password: "dpw", Refresh: -1}
	during, resolved, reported := newResolver(t, opts), newResolver(t, opts), newResolver(t, opts)
	refreshing := opts
	refreshing.Refresh = 200 * time.Millisecond
	refreshed := newResolver(t, refreshing)
	for _, r := range []*Resolver{during, resolved, reported, refreshed} {
		if got, err := r.Resolve(ctxFor(t, 20*time.Second)); err != nil || got != h.Primary.Addr {
			t.Fatalf("Resolve = %q, %v", got, err)
		}
	}

	killed := time.Now()
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	// The sentinels still name the dead primary, for down-after at least:
	// no answer in the meantime, and never the dead address.
	if got, err := during.Resolve(ctxFor(t, 300*time.Millisecond)); got == h.Primary.Addr || (err != nil && !errors.Is(err, ErrNoPrimary)) {
		t.Fatalf("Resolve right after the SIGKILL = %q, %v; want ErrNoPrimary (or the promoted replica)", got, err)
	}
	if _, err := h.WaitPromoted(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	// The caller gave up; the attempts it started went on.
	waitUntil(t, time.Second, "the promoted replica within a second, by the attempts Resolve started", func() bool { return during.Primary() == h.Replica.Addr })
	t.Logf("%s: sentinels named the promoted replica %v after the SIGKILL; the resolver asked during the failover reported it after %v",
		srv.Name, took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	for _, r := range []*Resolver{resolved, reported} {
		if got := r.Primary(); got != h.Primary.Addr {
			t.Fatalf("primary %q before anyone asked again; want the old %s (no message can reach this resolver)", got, h.Primary.Addr)
		}
		if n := r.Subscribed(); n != 0 {
			t.Fatalf("subscribed on %d sentinels, want 0 (the ACL denies the channel)", n)
		}
	}
	if got, err := resolved.Resolve(ctxFor(t, 10*time.Second)); err != nil || got != h.Replica.Addr {
		t.Fatalf("Resolve after the failover = %q, %v; want %s", got, err, h.Replica.Addr)
	}
	reported.ReportFailure(h.Primary.Addr)
	waitUntil(t, 10*time.Second, "the promoted replica after ReportFailure", func() bool { return reported.Primary() == h.Replica.Addr })
	waitUntil(t, 10*time.Second, "the promoted replica by the periodic refresh", func() bool { return refreshed.Primary() == h.Replica.Addr })
	for _, r := range []*Resolver{during, resolved, reported, refreshed} {
		if r.Failovers() != 1 {
			t.Fatalf("Failovers() = %d, want 1", r.Failovers())
		}
	}
}

// serverPort returns the tcp_port of the server the client reaches.
func serverPort(t *testing.T, c valkey.Client) int {
	t.Helper()
	p := serverPortOrZero(c)
	if p == 0 {
		t.Fatal("INFO server: no tcp_port")
	}
	return p
}

func serverPortOrZero(c valkey.Client) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "tcp_port:"); ok {
			p, _ := strconv.Atoi(v)
			return p
		}
	}
	return 0
}

// resolveUntilAttempted returns Resolve's error for a master that has no
// primary to find, once the resolver made an attempt of its own: Resolve
// then names the last attempt's reason. Each call waits 300 ms; on a loaded
// machine the first attempt (a round of the sentinels, a ROLE) can take
// longer, and Resolve cut before it ends names only its own deadline. The
// calls go on until the reason is there, up to 20 s.
func resolveUntilAttempted(t *testing.T, r *Resolver) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := r.Resolve(ctxFor(t, 300*time.Millisecond))
		if err == nil || strings.Contains(err.Error(), "last attempt") || time.Now().After(deadline) {
			return err
		}
	}
}
