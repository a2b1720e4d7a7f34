package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/stand/node"
)

// waitServing polls through the proxy until the upstream answers again.
func waitServing(t *testing.T, h *harness) {
	t.Helper()
	c := h.dial()
	poll(t, "service to resume", func() bool {
		return !strings.HasPrefix(string(c.do("EXISTS", "probe").got), "-UPSTREAM")
	})
}

func TestUpstreamKilledMidBatch(t *testing.T) {
	opts := node.Options{Role: node.Bare, AOF: true}
	n := node.StartT(t, opts)
	core, logs := observer.New(zap.InfoLevel)
	h := startProxyLogged(t, n, nil, zap.New(core), nil)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What the upstream did after the kill, and what holds the node's
		// port: a connection the proxy made after the kill names its peer.
		for _, e := range logs.All() {
			t.Logf("proxy log: %s %s %v", e.Time.Format("15:04:05.000"), e.Message, e.ContextMap())
		}
		_, port, _ := net.SplitHostPort(n.Addr)
		out, err := exec.Command("ss", "-tanp", "sport = :"+port+" or dport = :"+port).CombinedOutput()
		t.Logf("sockets on port %s (%v):\n%s", port, err, out)
	})
	c := h.dial()
	c.do("SET", "counter", "1").is("+OK\r\n")

	// Commands in flight while the node is frozen, then killed.
	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	c.send(cmd("INCR", "counter"), cmd("ECHO", "local"), cmd("INCR", "counter"), cmd("GET", "counter"))
	other := h.dial()
	other.send(cmd("INCR", "counter"))
	// Everything is written to the upstream socket before the node dies.
	admin := h.srv.up
	poll(t, "batches to be in flight", func() bool {
		p := admin.Shared(0, 2)
		if p == nil {
			return false
		}
		return p.InFlight() == 2
	})
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	lost := "-UPSTREAM connection to node lost; the command may have been applied\r\n"
	c.read().is(lost)
	c.read().is("$5\r\nlocal\r\n")
	c.read().is(lost)
	c.read().is(lost)
	other.read().is(lost)

	// While it is down, commands fail fast with the reason.
	poll(t, "the upstream to be down", func() bool { return !h.srv.Ready() })
	c.do("GET", "counter").hasPrefix("-UPSTREAM node unavailable: ")

	if err := n.Restart(opts); err != nil {
		t.Fatal(err)
	}
	waitServing(t, h)
	h.waitReady()
	// Nothing was resent: the counter is what it was before the freeze.
	h.dial().do("GET", "counter").is("$1\r\n1\r\n")
}

func TestUpstreamReplyTimeout(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.Upstream.Timeout = 200 * time.Millisecond })
	c := h.dial()
	c.do("SET", "k", "v").is("+OK\r\n")
	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = n.Thaw()
		}
	}()
	start := time.Now()
	c.do("GET", "k").is("-UPSTREAM connection to node lost; the command may have been applied\r\n")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}
	if err := h.srv.up.LastError(); err == nil || !errors.Is(err, ErrTimeout) {
		// The state may already be reconnecting; the reason is still the timeout.
		t.Logf("last error: %v", err)
	}
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	waitServing(t, h)
	h.dial().do("GET", "k").is("$1\r\nv\r\n")
}

func TestFenceHookGatesTraffic(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	hook := func(ctx context.Context, c fence.Conn) error {
		r, err := c.Do(ctx, "GET", "fence")
		if err != nil {
			return err
		}
		if r.Null || r.Str != "ok" {
			return fmt.Errorf("fence key is %q", r.Str)
		}
		return nil
	}
	opts := Options{
		Upstream:  UpstreamOptions{Name: "node", Address: n.Addr},
		Policy:    testPolicy(t),
		OnConnect: hook,
	}
	srv, err := New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	poll(t, "a fence failure", func() bool {
		err := srv.Upstream().LastError()
		return err != nil && errors.Is(err, ErrFence)
	})
	if srv.Ready() || srv.Upstream().Fenced() {
		t.Fatal("ready while the fence fails")
	}
	if err := srv.Readiness(); err == nil || !strings.Contains(err.Error(), `fence key is ""`) {
		t.Errorf("readiness = %v", err)
	}
	msg := string(srv.up.Unavailable())
	if !strings.HasPrefix(msg, "-UPSTREAM node unavailable: ") || !strings.Contains(msg, `fence key is \"\"`) && !strings.Contains(msg, `fence key is ""`) {
		t.Errorf("unavailable reply %q", msg)
	}
	if _, err := node.RawDo(n.Addr, "SET", "fence", "ok"); err != nil {
		t.Fatal(err)
	}
	poll(t, "the fence to pass", srv.Ready)
	if !srv.Upstream().Fenced() || srv.Upstream().LastError() != nil {
		t.Errorf("fenced %v, last error %v", srv.Upstream().Fenced(), srv.Upstream().LastError())
	}
}

func TestModuleFenceThroughHook(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module, NoBrand: true})
	install := false
	hookFor := func(install bool) OnConnectFunc {
		return func(ctx context.Context, c fence.Conn) error {
			_, err := fence.CheckModule(ctx, c, testPolicy(t).Map, install)
			return err
		}
	}
	opts := Options{
		Upstream:  UpstreamOptions{Name: "module", Address: n.Addr},
		Policy:    testPolicy(t),
		OnConnect: hookFor(install),
	}
	srv, err := New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	poll(t, "the fence to fail", func() bool { return errors.Is(srv.Upstream().LastError(), ErrFence) })
	if err := srv.Readiness(); err == nil || !errors.Is(err, fence.ErrBrandAbsent) {
		t.Errorf("readiness %v, want the absent brand", err)
	}
	if v, _ := node.RawDo(n.Addr, "EXISTS", "{emq}:version"); string(v) != ":0\r\n" {
		t.Errorf("the fence wrote the brand without install: %q", v)
	}

	h := startProxy(t, n, func(o *Options) { o.OnConnect = hookFor(true) })
	h.dial().do("EMQ.VERSION").hasPrefix("*6\r\n")
	if v, _ := node.RawDo(n.Addr, "GET", "{emq}:version"); string(v) != "$12\r\nechomq:6.0.0\r\n" {
		t.Errorf("brand after install %q", v)
	}
	// Blocking commands get their own fenced connection.
	h.dial().do("BLPOP", "nothing", "0.01").is("*-1\r\n")
}

// TestUpstreamReplyTimeoutSparesAnIdleConnection: the read deadline is left
// armed when nothing waits (proxy/deadline); when it passes on an idle shared
// connection (which nobody reads, and the upstream's watch checks) the
// connection lives on, and the next command clears or renews it.
func TestUpstreamReplyTimeoutSparesAnIdleConnection(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.Upstream.Timeout = 100 * time.Millisecond })
	c := h.dial()
	c.do("SET", "k", "v").is("+OK\r\n")
	p := h.srv.up.Shared(0, 2)
	if p == nil {
		t.Fatal("no shared connection")
	}
	rdl := p.ReadDeadline()
	if rdl.IsZero() {
		t.Fatal("no read deadline armed after a reply")
	}
	// Past the deadline, and past a few of the watch's idle checks.
	time.Sleep(time.Until(rdl) + 3*upstream.WatchInterval)
	if err := p.Failed(); err != nil {
		t.Fatalf("the idle connection was closed: %v", err)
	}
	c.do("GET", "k").is("$1\r\nv\r\n")
	if cur := h.srv.up.Shared(0, 2); cur != p {
		t.Error("the shared connection was replaced")
	}
}

// TestSharedConnectionUnderContention: many clients send pipelines of
// random depth at once on one shared upstream connection, so the writer's
// and the reader's roles pass between sessions (and to the writer's
// goroutine past MaxCombinedWrites, here 1) all the time; every reply
// reaches the client that asked, in its order.
func TestSharedConnectionUnderContention(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.Upstream.MaxCombinedWrites = 1 })
	const clients, rounds = 32, 150
	errs := make(chan error, clients)
	for i := range clients {
		go func() {
			c := h.dial()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			key, seq := fmt.Sprintf("contention:%d", i), 0
			for r := range rounds {
				depth := 1 + rng.IntN(8)
				var cmds [][]string
				for range depth {
					cmds = append(cmds, cmd("INCR", key))
				}
				c.send(cmds...)
				for k := range depth {
					seq++
					if got, want := string(c.read().got), fmt.Sprintf(":%d\r\n", seq); got != want {
						errs <- fmt.Errorf("client %d round %d reply %d: %q, want %q", i, r, k, got, want)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
