package proxy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/stand/node"
)

// moduleHook is the wire-6 fence over the stand's map, install off.
func moduleHook(t testing.TB) OnConnectFunc {
	m := testPolicy(t).Map
	return func(ctx context.Context, c fence.Conn) error {
		_, err := fence.CheckModule(ctx, c, m, false)
		return err
	}
}

// nodeStats reads the node's INFO commandstats over a plain connection.
func nodeStats(t testing.TB, n *node.Node) map[string]int64 {
	t.Helper()
	b, err := node.RawDo(n.Addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	_, text, _ := strings.Cut(string(b), "\r\n") // the bulk header
	st, err := node.ParseCommandStats(text)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestProbeNoticesABrandChangedOnALiveNode(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, func(o *Options) {
		o.OnConnect = moduleHook(t)
		o.Upstream.ProbeInterval = 50 * time.Millisecond
	})
	c := h.dial()
	c.do("SET", "before", "1").is("+OK\r\n")
	poll(t, "a probe to pass", func() bool { return h.srv.Upstream().Probes() > 0 })

	// Someone rebrands the live node as a scripts node: no connection breaks.
	if _, err := node.RawDo(n.Addr, "SET", "{emq}:version", "echomq:4.0.0"); err != nil {
		t.Fatal(err)
	}
	poll(t, "readiness to turn false", func() bool { return !h.srv.Ready() })
	if err := h.srv.Readiness(); !errors.Is(err, fence.ErrForeignBrand) && !errors.Is(err, ErrLost) {
		t.Errorf("readiness %v, want the foreign brand", err)
	}
	poll(t, "the reconnect to fail the fence", func() bool { return errors.Is(h.srv.Readiness(), fence.ErrForeignBrand) })

	// While it fails, no client command reaches the node.
	before := nodeStats(t, n)
	c = h.dial()
	for _, args := range [][]string{{"SET", "during", "1"}, {"INCR", "counter"}, {"HSET", "h", "f", "v"}} {
		got := string(c.do(args...).got)
		if !strings.HasPrefix(got, "-UPSTREAM node unavailable: ") || !strings.Contains(got, "foreign brand") {
			t.Errorf("%v answered %q, want the fence error", args, got)
		}
	}
	c.do("GET", "{emq}:version").is("-FENCE upstream is not fenced; {emq}:version is unavailable\r\n")
	after := nodeStats(t, n)
	for _, name := range []string{"set", "incr", "hset"} {
		if after[name] != before[name] {
			t.Errorf("%s ran %d times on the node while its fence failed", name, after[name]-before[name])
		}
	}
	if v, _ := node.RawDo(n.Addr, "EXISTS", "during", "counter", "h"); string(v) != ":0\r\n" {
		t.Errorf("client keys reached the node: EXISTS = %q", v)
	}

	// The brand restored: the reconnect loop fences again and serves.
	if _, err := node.RawDo(n.Addr, "SET", "{emq}:version", "echomq:6.0.0"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h.waitReady()
	t.Logf("ready again %v after the brand was restored", time.Since(start).Round(time.Millisecond))
	c.do("GET", "before").is("$1\r\n1\r\n")
	c.do("GET", "{emq}:version").is("$12\r\nechomq:4.0.0\r\n")
}

func TestProbeDisabled(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, func(o *Options) {
		o.OnConnect = moduleHook(t)
		o.Upstream.ProbeInterval = -1
	})
	if _, err := node.RawDo(n.Addr, "SET", "{emq}:version", "echomq:4.0.0"); err != nil {
		t.Fatal(err)
	}
	// Without the probe the change goes unnoticed until a reconnect: the
	// shared connection keeps serving (the module's own fence still refuses
	// its write verbs).
	h.dial().do("SET", "x", "1").is("+OK\r\n")
	if !h.srv.Ready() || h.srv.Upstream().Probes() != 0 {
		t.Errorf("ready %v, probes %d with the probe disabled", h.srv.Ready(), h.srv.Upstream().Probes())
	}
}

func TestProbeTimeoutIsNoVerdict(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, func(o *Options) {
		o.OnConnect = moduleHook(t)
		o.Upstream.ProbeInterval = 20 * time.Millisecond
		o.Upstream.DialTimeout = 100 * time.Millisecond
	})
	c := h.dial()
	c.do("SET", "k", "1").is("+OK\r\n")
	probeErrs := counterValue(t, h.srv.met.UpErrors.WithLabelValues("node", "probe"))
	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = n.Thaw()
		}
	}()
	// A command in flight on the shared connection while probes time out.
	c.send(cmd("INCR", "k"))
	poll(t, "probes to time out", func() bool {
		return counterValue(t, h.srv.met.UpErrors.WithLabelValues("node", "probe")) >= probeErrs+2
	})
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	// The slow node was not taken for a broken fence: the command completes
	// on the same connection, once.
	c.read().is(":2\r\n")
	if r := counterValue(t, h.srv.met.Reconnects.WithLabelValues("node")); r != 0 {
		t.Errorf("%v reconnects after probe timeouts", r)
	}
	if !h.srv.Ready() {
		t.Errorf("not ready after the thaw: %v", h.srv.Readiness())
	}
}

func TestProbeFailureAlsoStopsDedicatedConnections(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, func(o *Options) {
		o.OnConnect = moduleHook(t)
		o.Upstream.ProbeInterval = 20 * time.Millisecond
	})
	// One client pinned by WATCH, one with a blocking connection of its own.
	w := h.dial()
	w.do("WATCH", "w").is("+OK\r\n")
	b := h.dial()
	b.do("BLPOP", "list", "0.01").is("*-1\r\n")

	if _, err := node.RawDo(n.Addr, "SET", "{emq}:version", "acme:1.0.0"); err != nil {
		t.Fatal(err)
	}
	poll(t, "the probe to fail the fence", func() bool { return errors.Is(h.srv.Readiness(), fence.ErrForeignBrand) })
	before := nodeStats(t, n)
	w.do("SET", "w", "1").hasPrefix("-UPSTREAM node unavailable: ")
	b.do("BLPOP", "list", "0.01").hasPrefix("-UPSTREAM node unavailable: ")
	after := nodeStats(t, n)
	for _, name := range []string{"set", "blpop"} {
		if after[name] != before[name] {
			t.Errorf("%s reached the node over a dedicated connection while the fence failed", name)
		}
	}
}
