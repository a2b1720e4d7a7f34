package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// fakeRun fills a runner with results as a run would.
func fakeRun(direct, proxied, twem, lua, viaProxy, auditOn, auditOff float64, idleBytes int64) *runner {
	r := &runner{results: newResults(), pipelines: []int{16}}
	r.variants = []ptVariant{{name: "P1", pipeline: 1}}
	r.ptTargets = []target{{name: "direct"}, {name: "emqproxy"}, {name: "g1"}, {name: "twemproxy"}}
	for name, v := range map[string]float64{"direct": direct, "emqproxy": proxied, "g1": proxied, "twemproxy": twem} {
		r.pt[key2("P1", name)] = []ptResult{{rps: map[string]float64{"SET": v, "GET": v}}}
	}
	for name, v := range map[string]float64{mixLua: lua, mixProxy: viaProxy, mixProxy1: viaProxy, mixAuditOn: auditOn, mixAuditOff: auditOff} {
		var m mixResult
		m.OpsPerSec = v
		r.mixRes[key2("16", name)] = []mixResult{m}
	}
	r.idle = idleResult{conns: 1000, before: 0, after: idleBytes}
	return r
}

func TestChecks(t *testing.T) {
	met := func(r *runner) map[string]bool {
		out := map[string]bool{}
		for _, c := range r.checks() {
			out[c.what] = c.ok
		}
		return out
	}
	good := met(fakeRun(100, 96, 90, 100, 101, 91, 100, 16*1024*1000))
	for what, ok := range good {
		if !ok {
			t.Errorf("good run: %q missed", what)
		}
	}
	bad := met(fakeRun(100, 84, 95, 100, 99, 89, 100, 16*1024*1000+1000))
	for what, ok := range bad {
		if ok {
			t.Errorf("bad run: %q met", what)
		}
	}
	if len(good) != len(bad) || len(good) != 2*2+2+1+1 {
		t.Fatalf("checks: %d and %d", len(good), len(bad))
	}
}

func TestLatChecks(t *testing.T) {
	run := func(proxyGet, proxyEnq latPoint) map[string]bool {
		r := &runner{latGets: map[string][]latPoint{}, latEnq: map[string][]latPoint{}, latLoops: map[string][]mixResult{}}
		r.ptTargets = []target{{name: "direct"}, {name: "emqproxy"}, {name: "g1"}, {name: "twemproxy"}}
		r.latLoopTargets = []mixTarget{{name: "native"}, {name: "emqproxy"}}
		for name, p := range map[string]latPoint{"direct": {50, 100}, "emqproxy": proxyGet, "g1": proxyGet, "twemproxy": {90, 200}} {
			r.latGets[key2("1", name)] = []latPoint{p}
		}
		for name, p := range map[string]latPoint{"direct": {40, 80}, "emqproxy": proxyEnq, "g1": proxyEnq} {
			r.latEnq[key2("1", name)] = []latPoint{p}
		}
		out := map[string]bool{}
		for _, c := range r.latChecks() {
			out[c.what] = c.ok
		}
		return out
	}
	// twemproxy adds 40 µs at p50 and 100 µs at p99.
	good := run(latPoint{90, 250}, latPoint{80, 230})
	bad := run(latPoint{91, 251}, latPoint{81, 231})
	if len(good) != 8 || len(bad) != 8 {
		t.Fatalf("checks: %d and %d, want 8", len(good), len(bad))
	}
	for what, ok := range good {
		if !ok {
			t.Errorf("good run: %q missed", what)
		}
		if bad[what] {
			t.Errorf("bad run: %q met", what)
		}
	}
}

func TestProcReadings(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	if rss := rssOf(n.PID()); rss < 1<<20 {
		t.Fatalf("RSS of redis-server %d bytes", rss)
	}
	s0 := statsOf(n.Addr)
	for range 10 {
		if _, err := node.RawDo(n.Addr, "PING"); err != nil {
			t.Fatal(err)
		}
	}
	s1 := statsOf(n.Addr)
	if d := s1.cmds - s0.cmds; d < 10 || s1.reads-s0.reads < 10 {
		t.Fatalf("INFO stats moved by %d commands, %d reads", d, s1.reads-s0.reads)
	}
	// Burn CPU until /proc shows some (its unit is 10ms), at most 5s.
	x := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		for i := range 1_000_000 {
			x += i
		}
		if c := cpuOf(os.Getpid()); c.user+c.sys > 0 {
			return
		}
	}
	t.Fatalf("own CPU time still zero after 5s of work (%d)", x)
}

func TestResultStem(t *testing.T) {
	stem := resultStem(node.RepoRoot(), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if !strings.HasPrefix(stem, "2026-01-02-0304-") || len(stem) < len("2026-01-02-0304-")+4 {
		t.Fatalf("stem %q", stem)
	}
}

func TestAllowance(t *testing.T) {
	us := func(n int) cpu { return cpu{user: time.Duration(n) * time.Microsecond} }
	// Baseline: 1000 ops at 10 µs of load and 6 µs of server each, in 8 ms
	// of wall time: 16 µs/op, 2 cores busy.
	base := spend{load: us(10_000), server: us(6_000), ops: 1000, wall: 8 * time.Millisecond}
	if got := base.total(); got != 16 {
		t.Errorf("total = %v, want 16", got)
	}
	if got := base.busy(); got != 2 {
		t.Errorf("busy = %v, want 2", got)
	}
	// Through a proxy the server spends 2 µs/op and the load the same 10:
	// for 0.8 of the baseline the path may spend 20 µs/op, 8 of them proxy.
	via := spend{load: us(10_000), path: us(9_000), server: us(2_000), ops: 1000, wall: 10 * time.Millisecond}
	if got := allowance(base, via, 0.8); got != 8 {
		t.Errorf("allowance = %v, want 8", got)
	}
	if got := via.us(via.path); got != 9 {
		t.Errorf("proxy per op = %v, want 9", got)
	}
	var empty spend
	if empty.total() != 0 || empty.busy() != 0 {
		t.Errorf("empty spend: total %v busy %v", empty.total(), empty.busy())
	}
}

func TestCeiling(t *testing.T) {
	us := func(n int) cpu { return cpu{user: time.Duration(n) * time.Microsecond} }
	// The proxy is the busiest process at 4 µs/op: 250,000 ops/s.
	s := spend{load: us(2_000), path: us(4_000), server: us(1_000), ops: 1000}
	if got := s.ceiling(); got != 250_000 {
		t.Errorf("ceiling = %v, want 250000", got)
	}
	if got := (spend{}).ceiling(); got != 0 {
		t.Errorf("empty ceiling = %v", got)
	}
}

// TestBudgetRenders writes the budget section of a run with every figure
// present and checks the allowance row of a target.
func TestBudgetRenders(t *testing.T) {
	r := fakeRun(100, 90, 80, 100, 100, 95, 100, 1000)
	us := func(n int) cpu { return cpu{user: time.Duration(n) * time.Microsecond} }
	for name, res := range map[string]ptResult{
		"direct":    {load: us(10_000), srvCPU: us(6_000), ops: 1000, wall: 8 * time.Millisecond},
		"emqproxy":  {load: us(10_000), cpu: us(9_000), srvCPU: us(2_000), ops: 1000, wall: 10 * time.Millisecond},
		"g1":        {load: us(10_000), cpu: us(8_000), srvCPU: us(2_000), ops: 1000, wall: 10 * time.Millisecond},
		"twemproxy": {load: us(10_000), cpu: us(7_000), srvCPU: us(2_000), ops: 1000, wall: 10 * time.Millisecond},
	} {
		res.rps = map[string]float64{"SET": 1, "GET": 1}
		r.pt[key2("P1", name)] = []ptResult{res}
	}
	r.mixTargets = []mixTarget{{name: mixLua}, {name: mixProxy, pid: 1}, {name: mixProxy1, pid: 1}, {name: mixNative}, {name: mixAuditOn, pid: 1}}
	var b strings.Builder
	r.writeBudget(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	out := b.String()
	// P1 ≥ 0.85× direct: 16/0.85 − (10 + 2) = 6.82 µs for emqproxy, which spent 9.
	if !strings.Contains(out, "| passthrough P1 ≥ 0.85× direct | 6.82 | 9.00 |") {
		t.Errorf("budget section:\n%s", out)
	}
	if strings.Contains(out, mixAuditOn) {
		t.Errorf("the audit targets belong to section 4:\n%s", out)
	}
}

func TestMetricsParsing(t *testing.T) {
	m := parseMetrics(`# HELP emqproxy_upstream_errors_total Upstream connection failures, by kind.
# TYPE emqproxy_upstream_errors_total counter
emqproxy_upstream_errors_total{kind="probe",upstream="module-a"} 2
emqproxy_upstream_errors_total{kind="fence",upstream="module-a"} 1
emqproxy_upstream_errors_total{kind="probe",upstream="module-b"} 3
emqproxy_upstream_reconnects_total{upstream="module-a"} 4
emqproxy_upstream_reconnects_totalx 9
emqproxy_client_rejected_total{reason="reply_bytes"} 1
emqproxy_client_rejected_total{reason="write"} 0
`)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"emqproxy_upstream_errors_total", []string{`kind="probe"`}, 5},
		{"emqproxy_upstream_errors_total", []string{`kind="probe"`, `upstream="module-a"`}, 2},
		{"emqproxy_upstream_errors_total", []string{`kind="fence"`}, 1},
		{"emqproxy_upstream_reconnects_total", nil, 4},
		{"emqproxy_client_isolated_total", nil, 0},
	} {
		if got := metricSum(m, tc.name, tc.labels...); got != tc.want {
			t.Errorf("metricSum(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if hasSeries(m, "emqproxy_client_isolated_total") || !hasSeries(m, "emqproxy_upstream_reconnects_total") {
		t.Error("hasSeries")
	}
	if got := labelValues(m, "emqproxy_client_rejected_total", "reason"); got != "reply_bytes 1" {
		t.Errorf("labelValues = %q", got)
	}
}

// TestResetNodeKeepsTheBrand resets a node again and again while a client
// reads the version key as fast as it can, as a proxy's fence probe does:
// the reader must never find the brand absent (a reset in two steps, the
// keys dropped and then the brand written back, shows it absent in
// between, and a proxy in front of the node then fails its fence), and
// each reset must leave the brand and nothing else.
func TestResetNodeKeepsTheBrand(t *testing.T) {
	for _, role := range []node.Role{node.Module, node.Scripts} {
		t.Run(role.String(), func(t *testing.T) {
			n := node.StartT(t, node.Options{Role: role})
			r := &runner{}
			nc, err := net.Dial("tcp", n.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			stop, done := make(chan struct{}), make(chan error, 1)
			var reads int
			go func() {
				br := bufio.NewReader(nc)
				get := resp.AppendCommand(nil, "GET", node.VersionKey)
				for {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					if _, err := nc.Write(get); err != nil {
						done <- err
						return
					}
					reply, err := resp.ReadReply(br)
					if err != nil {
						done <- err
						return
					}
					if !bytes.Contains(reply, []byte("echomq:")) {
						done <- fmt.Errorf("GET %s answered %q after %d reads", node.VersionKey, reply, reads)
						return
					}
					reads++
				}
			}()
			for i := range 200 {
				if _, err := node.RawDo(n.Addr, "SET", fmt.Sprintf("k%d", i), "v"); err != nil {
					t.Fatal(err)
				}
				if err := r.resetNode(n); err != nil {
					t.Fatal(err)
				}
			}
			close(stop)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if reply, err := node.RawDo(n.Addr, "DBSIZE"); err != nil || string(reply) != ":1\r\n" {
				t.Fatalf("DBSIZE after the resets: %q, %v (want the brand alone)", reply, err)
			}
			t.Logf("%d reads of the brand over 200 resets, none without it", reads)
		})
	}
}

// TestChecks32: issue 32's targets are judged against their anchors: the
// proxy's CPU per call against twemproxy's, the job mix against Lua at
// 1.2× for pipeline 16.
func TestChecks32(t *testing.T) {
	run := func(proxyUs, twemUs, viaProxy float64) map[string]bool {
		r := fakeRun(100, 100, 100, 100, viaProxy, 100, 100, 0)
		for name, us := range map[string]float64{"emqproxy": proxyUs, "twemproxy": twemUs} {
			res := &r.pt[key2("P1", name)][0]
			res.ops = 1000
			res.cpu = cpu{user: time.Duration(us * 1000 * float64(time.Microsecond))}
		}
		out := map[string]bool{}
		for _, c := range r.checks32() {
			out[c.what] = c.ok
		}
		return out
	}
	const cpuCheck = "passthrough P1 50 clients: proxy CPU per call ≤ twemproxy's"
	const mixCheck = "job mix P16 through the proxy ≥ 1.2× Lua directly"
	if got := run(8, 9, 121); !got[cpuCheck] || !got[mixCheck] {
		t.Fatalf("a proxy cheaper than twemproxy, 1.21× Lua: %v", got)
	}
	if got := run(10, 9, 110); got[cpuCheck] || got[mixCheck] {
		t.Fatalf("a proxy dearer than twemproxy, 1.1× Lua: %v", got)
	}
}
