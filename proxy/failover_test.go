package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/discovery"
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The proxy in front of a master set under Sentinel (upstream/failover.go): a
// module primary, its replica and three sentinels started by each test
// (node.StartHAT), once per server.

// haTimeout bounds a failover's waits in these tests (the stand's
// sentinels fail over in about two seconds).
const haTimeout = 30 * time.Second

// haStand starts a module primary, its replica and three sentinels.
func haStand(t *testing.T, srv node.Server) *node.HA {
	t.Helper()
	if _, err := node.BuildModule(); err != nil {
		t.Fatalf("module: %v", err)
	}
	return node.StartHAT(t, node.HAOptions{Server: srv.Path, Role: node.Module})
}

// sentinelProxy starts a proxy whose one upstream is the stand's master
// set, fenced as a module node, with mod applied to its options, and waits
// until it is ready. It returns the harness and the registry of its
// metrics.
func sentinelProxy(t *testing.T, h *node.HA, mod func(*Options)) (*harness, *prometheus.Registry) {
	t.Helper()
	pol := testPolicy(t)
	reg := prometheus.NewRegistry()
	opts := Options{
		Upstream: UpstreamOptions{
			Name:         "module-a",
			Sentinel:     &discovery.Options{Master: h.Master, Addresses: h.SentinelAddrs()},
			DialTimeout:  2 * time.Second,
			Timeout:      2 * time.Second,
			FailoverWait: 10 * time.Second,
		},
		OnConnect: func(ctx context.Context, c fence.Conn) error {
			_, err := fence.CheckModule(ctx, c, pol.Map, false)
			return err
		},
		Policy:   pol,
		Registry: reg,
	}
	if mod != nil {
		mod(&opts)
	}
	srv, addr := serveProxy(t, opts, zaptest.NewLogger(t), nil)
	hs := &harness{t: t, srv: srv, addr: addr}
	poll(t, "proxy ready", srv.Ready)
	return hs, reg
}

// timed sends one command on a fresh deadline and reads its reply,
// returning it with how long it took.
func (c *client) timed(d time.Duration, args ...string) (reply, time.Duration) {
	c.t.Helper()
	_ = c.nc.SetDeadline(time.Now().Add(d))
	start := time.Now()
	r := c.do(args...)
	return r, time.Since(start)
}

// primaryMetric returns the address emqproxy_upstream_primary names for
// the upstream ("" for none; t.Fatal for more than one).
func primaryMetric(t *testing.T, reg *prometheus.Registry, upstream string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, mf := range mfs {
		if mf.GetName() != "emqproxy_upstream_primary" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["upstream"] == upstream && m.GetGauge().GetValue() == 1 {
				found = append(found, labels["address"])
			}
		}
	}
	if len(found) > 1 {
		t.Fatalf("emqproxy_upstream_primary names %v", found)
	}
	if len(found) == 0 {
		return ""
	}
	return found[0]
}

func failovers(t *testing.T, srv *Server) float64 {
	t.Helper()
	return testutil.ToFloat64(srv.met.Failovers.WithLabelValues(srv.up.Name()))
}

// nodeGet reads a key straight from a node.
func nodeGet(t *testing.T, n *node.Node, key string) string {
	t.Helper()
	r, err := node.RawDo(n.Addr, "GET", key)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, n.Addr, err)
	}
	return string(r)
}

func TestFailoverFollowedIntegration(t *testing.T) {
	node.Long(t)
	node.EachServerParallel(t, testFailoverFollowed)
}

// testFailoverFollowed runs one master set through a manual failover (the
// old primary stays up, demoted), a SIGKILL of the new primary with
// commands in flight, and the loss of every node.
func testFailoverFollowed(t *testing.T, srv node.Server) {
	h := haStand(t, srv)
	hs, reg := sentinelProxy(t, h, nil)
	c := hs.dial()
	r, _ := c.timed(testTimeout, "SET", "k", "on-the-first")
	r.is("+OK\r\n")
	if got := primaryMetric(t, reg, "module-a"); got != h.Primary.Addr {
		t.Fatalf("primary metric %q, want %s", got, h.Primary.Addr)
	}
	if f := failovers(t, hs.srv); f != 0 {
		t.Fatalf("failovers %v before any", f)
	}

	// 1. A manual failover: the old primary is demoted and stays up. The
	// proxy follows +switch-master, closes its connections to the old
	// primary, and writes land on the new one.
	if got, err := node.RawDo(h.Sentinels[0].Addr, "SENTINEL", "FAILOVER", h.Master); err != nil || string(got) != "+OK\r\n" {
		t.Fatalf("SENTINEL FAILOVER: %q, %v", got, err)
	}
	poll(t, "the proxy to follow the manual failover", func() bool { return primaryMetric(t, reg, "module-a") == h.Replica.Addr })
	// A write now either lands on the new primary or, sent before the
	// switch closed the connection, gets the explicit error; never a
	// silent success elsewhere.
	deadline := time.Now().Add(haTimeout)
	for {
		r, _ := c.timed(testTimeout, "SET", "k", "on-the-second")
		if string(r.got) == "+OK\r\n" {
			break
		}
		if !strings.HasPrefix(string(r.got), "-UPSTREAM") && !strings.HasPrefix(string(r.got), "-READONLY") {
			t.Fatalf("write during the manual failover: %q", r.got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes never resumed after the manual failover: %q", r.got)
		}
	}
	if got := nodeGet(t, h.Replica, "k"); got != "$13\r\non-the-second\r\n" {
		t.Fatalf("the new primary holds k = %q", got)
	}
	if f := failovers(t, hs.srv); f != 1 {
		t.Errorf("failovers %v after one switch", f)
	}
	if err := hs.srv.Readiness(); err != nil {
		t.Errorf("not ready after the switch: %v", err)
	}
	// The demoted node has the write too before the next failover.
	// (Sentinel turns the old primary into a replica of the new one on
	// its own schedule: poll.)
	// (Its INFO is read every 10 s outside a failover.)
	deadline = time.Now().Add(haTimeout)
	for {
		got, err := node.RawDo(h.Replica.Addr, "WAIT", "1", "500")
		if err == nil && string(got) == ":1\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demoted node does not replicate the new primary: WAIT %q, %v", got, err)
		}
	}

	// 2. The new primary is killed with commands in flight: they get the
	// explicit error; a command sent afterwards waits for the next
	// primary and is answered there, within the failover's time plus a
	// second.
	if err := h.Replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = h.Replica.Thaw()
		}
	}()
	_ = c.nc.SetDeadline(time.Now().Add(testTimeout))
	c.send(cmd("INCR", "n"), cmd("INCR", "n"))
	poll(t, "commands in flight", func() bool {
		p := hs.srv.up.Shared(0, 2)
		if p == nil {
			return false
		}
		return p.InFlight() >= 1
	})
	killed := time.Now()
	if err := h.Replica.Kill(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	lost := "-UPSTREAM connection to module-a lost; the command may have been applied\r\n"
	_ = c.nc.SetDeadline(time.Now().Add(testTimeout))
	c.read().is(lost)
	c.read().is(lost)
	after := hs.dial()
	// A blocking command (a connection of the client's own) sent now
	// waits for the next primary too.
	blocked := make(chan string, 1)
	go func() {
		nc, err := net.DialTimeout("tcp", hs.addr, testTimeout)
		if err != nil {
			blocked <- err.Error()
			return
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(2 * haTimeout))
		if _, err := nc.Write(resp.AppendCommand(nil, "BLPOP", "nolist", "0.05")); err != nil {
			blocked <- err.Error()
			return
		}
		r, err := resp.ReadReply(bufio.NewReader(nc))
		if err != nil {
			blocked <- err.Error()
			return
		}
		blocked <- string(r)
	}()
	promoted := make(chan time.Duration, 1)
	go func() {
		// Sentinel refuses a second failover of the same master within
		// twice its failover timeout: this may take several seconds.
		if err := h.WaitNamed(h.Primary, haTimeout); err != nil {
			t.Error(err)
		}
		promoted <- time.Since(killed)
	}()
	var r2 reply
	var took time.Duration
	for {
		r2, took = after.timed(2*hs.srv.opts.Upstream.FailoverWait, "GET", "k")
		if !strings.HasPrefix(string(r2.got), "-UPSTREAM module-a has no primary") {
			break
		}
		// The wait is bounded by failover_wait from the loss: Sentinel's
		// own delay between two failovers may be longer.
		if took > hs.srv.opts.Upstream.FailoverWait+time.Second {
			t.Fatalf("a command waited %v, bound %v", took, hs.srv.opts.Upstream.FailoverWait)
		}
		time.Sleep(10 * time.Millisecond) // polling interval: past the bound, the error comes at once
	}
	served := time.Since(killed)
	p := <-promoted
	t.Logf("%s: killed the primary; the sentinels promoted %s after %v; the proxy served again after %v", srv.Name, h.Primary.Addr, p.Round(time.Millisecond), served.Round(time.Millisecond))
	r2.is("$13\r\non-the-second\r\n")
	if served > p+time.Second {
		t.Errorf("served again %v after the kill, %v after the promotion (bound: one second)", served, served-p)
	}
	if f := failovers(t, hs.srv); f != 2 {
		t.Errorf("failovers %v after two switches", f)
	}
	if b := <-blocked; p < hs.srv.opts.Upstream.FailoverWait-time.Second && b != "*-1\r\n" {
		t.Errorf("a blocking command sent after the kill: %q, want the new primary's nil", b)
	} else {
		t.Logf("a blocking command sent after the kill: %q", b)
	}

	// 3. Every node gone: a new command waits at most failover_wait, then
	// gets the error that says so; once that is past, commands get it at
	// once.
	if err := h.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	r3, took := after.timed(testTimeout+hs.srv.opts.Upstream.FailoverWait, "GET", "k")
	r3.hasPrefix("-UPSTREAM module-a ")
	if !strings.HasPrefix(string(r3.got), "-UPSTREAM module-a has no primary: ") && string(r3.got) != lost {
		t.Errorf("with no primary: %q", r3.got)
	}
	if took > hs.srv.opts.Upstream.FailoverWait+time.Second {
		t.Errorf("a command waited %v with no primary, bound %v", took, hs.srv.opts.Upstream.FailoverWait)
	}
	poll(t, "not ready without a primary", func() bool { return hs.srv.Readiness() != nil })
	var r4 reply
	end := time.Now().Add(hs.srv.opts.Upstream.FailoverWait + testTimeout)
	for {
		r4, took = after.timed(testTimeout, "GET", "k")
		if took < hs.srv.opts.Upstream.FailoverWait/2 || time.Now().After(end) {
			break
		}
	}
	r4.hasPrefix("-UPSTREAM module-a has no primary: ")
	t.Logf("with no primary: %q after %v", r4.got, took)
	if took > hs.srv.opts.Upstream.FailoverWait/2 {
		t.Errorf("past failover_wait a command still waited %v", took)
	}
}

func TestFailoverForeignBrandIntegration(t *testing.T) {
	node.Long(t)
	node.EachServerParallel(t, testFailoverForeignBrand)
}

// testFailoverForeignBrand promotes a replica that holds another fleet's
// brand: the fence refuses it, and no client byte reaches it.
func testFailoverForeignBrand(t *testing.T, srv node.Server) {
	h := haStand(t, srv)
	hs, _ := sentinelProxy(t, h, func(o *Options) { o.Upstream.FailoverWait = 2 * time.Second })
	c := hs.dial()
	r, _ := c.timed(testTimeout, "EXISTS", "probe-before")
	r.is(":0\r\n")
	// The replica's own brand, written where only it has it.
	const foreign = "echomq:6.0.0-another-fleet"
	for _, args := range [][]string{{"CONFIG", "SET", "replica-read-only", "no"}, {"SET", node.VersionKey, foreign}} {
		if got, err := node.RawDo(h.Replica.Addr, args...); err != nil || string(got) != "+OK\r\n" {
			t.Fatalf("%v on the replica: %q, %v", args, got, err)
		}
	}
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitPromoted(haTimeout); err != nil {
		t.Fatal(err)
	}
	poll(t, "the fence to refuse the promoted node", func() bool { return errors.Is(hs.srv.Readiness(), ErrFence) })
	t.Logf("readiness: %v", hs.srv.Readiness())
	for range 20 {
		r, took := c.timed(testTimeout, "EXISTS", "probe-after")
		if !strings.HasPrefix(string(r.got), "-UPSTREAM module-a unavailable: ") || !strings.Contains(string(r.got), "fence") {
			t.Fatalf("a command to the refused primary: %q", r.got)
		}
		if took > time.Second {
			t.Errorf("a command waited %v for a primary the fence refused", took)
		}
	}
	stats, err := node.CommandStats(context.Background(), h.Replica.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if stats["exists"] != 0 {
		t.Errorf("client commands reached the foreign node: EXISTS %d times", stats["exists"])
	}
	if got := nodeGet(t, h.Replica, node.VersionKey); got != "$26\r\n"+foreign+"\r\n" {
		t.Errorf("the foreign node's brand is now %q", got)
	}
}

func TestControlLeaseAcrossFailoverIntegration(t *testing.T) {
	node.Long(t)
	node.EachServerParallel(t, testControlLeaseAcrossFailover)
}

// testControlLeaseAcrossFailover: the control loop reaches a Sentinel
// upstream through valkey-go's Sentinel client, and keeps its lease on the
// promoted node after a failover.
func testControlLeaseAcrossFailover(t *testing.T, srv node.Server) {
	h := haStand(t, srv)
	hs, _ := sentinelProxy(t, h, func(o *Options) {
		o.Control = &ControlOptions{Poll: 100 * time.Millisecond, Lease: time.Second}
	})
	id := hs.srv.ControlID()
	renewedOn := func(n *node.Node, after int64) bool {
		cn, err := table.Dial(table.NodeOptions{Name: "direct", Address: n.Addr})
		if err != nil {
			return false
		}
		defer cn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		regs, err := cn.Proxies(ctx)
		if err != nil {
			return false
		}
		for _, r := range regs {
			if r.ID == id && r.Live && r.Renewed > after {
				return true
			}
		}
		return false
	}
	poll(t, "a lease on the primary", func() bool { return renewedOn(h.Primary, 0) })
	killed := time.Now().UnixMilli()
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	promoted, err := h.WaitPromoted(haTimeout)
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the lease renewed on the promoted node", func() bool { return renewedOn(promoted, killed) })
	poll(t, "emqproxy_control_lease 1 after the failover", func() bool {
		return testutil.ToFloat64(hs.srv.ctl.leaseOK.WithLabelValues("module-a")) == 1
	})
}
