package main

import (
	"fmt"
	"runtime"
	"time"
)

// The CPU budget. The load generator, the proxy and the server share this
// machine's cores; when a run keeps them all busy, its throughput is the
// cores it had over the CPU the whole path spends per operation. So a
// throughput target against a baseline is a CPU target: for the proxied
// path to reach R times the baseline's rate with the same cores busy, the
// whole path may spend at most 1/R of the baseline's CPU per operation,
// and what is left after the load generator's and the server's share is
// what the proxy may spend. The report prints that allowance beside what
// each proxy spent, and the cores each run kept busy, so a reader can see
// which targets no proxy could reach here (the allowance is below what
// twemproxy, or any proxy, spends) and which are the proxy's to win.

// spend is the CPU one path used over a set of runs.
type spend struct {
	load, path, server cpu           // load generator, proxy (zero when direct), server
	ops                float64       // operations in those runs
	wall               time.Duration // the runs' wall time
}

func (s *spend) add(load, path, server cpu, ops float64, wall time.Duration) {
	s.load, s.path, s.server = s.load.plus(load), s.path.plus(path), s.server.plus(server)
	s.ops += ops
	s.wall += wall
}

// us is c per operation in microseconds (0 without operations).
func (s spend) us(c cpu) float64 {
	if s.ops == 0 {
		return 0
	}
	return float64((c.user + c.sys).Nanoseconds()) / 1e3 / s.ops
}

// total is the whole path's CPU per operation, in microseconds.
func (s spend) total() float64 { return s.us(s.load) + s.us(s.path) + s.us(s.server) }

// busy is how many cores the path kept busy on average.
func (s spend) busy() float64 {
	if s.wall <= 0 {
		return 0
	}
	all := s.load.user + s.load.sys + s.path.user + s.path.sys + s.server.user + s.server.sys
	return all.Seconds() / s.wall.Seconds()
}

// ceiling is the rate the path would reach with a core for each of its
// processes, each used to the full: one over the largest per-process CPU
// per operation (ops/s). It leaves out latency, and counts a multi-threaded
// proxy's CPU as if on one core.
func (s spend) ceiling() float64 {
	most := max(s.us(s.load), s.us(s.path), s.us(s.server))
	if most == 0 {
		return 0
	}
	return 1e6 / most
}

// allowance is the most CPU per operation the proxy of path p may spend for
// p to reach ratio times the rate of baseline b with as many cores busy.
func allowance(b, p spend, ratio float64) float64 {
	return b.total()/ratio - p.us(p.load) - p.us(p.server)
}

// ptSpend sums one passthrough variant's runs on one target (SET and GET
// together: redis-benchmark runs both in one process).
func (r *runner) ptSpend(variant, tgt string) spend {
	var s spend
	for _, res := range r.pt[key2(variant, tgt)] {
		s.add(res.load, res.cpu, res.srvCPU, float64(res.ops), res.wall)
	}
	return s
}

// mixSpend sums one job mix pipeline's runs on one target. The jobmix
// process's CPU covers its connecting and warmup too, so ops are estimated
// as ops/s × (warmup + window), as in the mix's own CPU table.
func (r *runner) mixSpend(pipeline int, tgt string) spend {
	return r.spendOf(r.mixRes[key2(itoa(pipeline), tgt)])
}

// spendOf sums job mix runs: ops estimated as ops/s × (warmup + window).
func (r *runner) spendOf(rs []mixResult) spend {
	var s spend
	for _, res := range rs {
		s.add(res.load, res.cpu, res.srvCPU, res.OpsPerSec*(r.mixWarmup+r.mixDur).Seconds(), res.wall)
	}
	return s
}

// writeBudget writes the CPU budget section.
func (r *runner) writeBudget(w func(string, ...any)) {
	w("\n## The CPU budget\n\n")
	w("How: from the runs of sections 1 and 2 in the %s layout; the deployment layout's CPU per operation is in its own tables of sections 1 and 2 (there each process has its core, which this section's last columns project).\n\n", r.shared().name)
	w("Client, proxy and server share %d cores. Each row is the CPU every process of the path spent per operation, summed over the repetitions (rusage of the load generator, /proc/<pid>/stat of the proxy and the server), and how many cores the path kept busy on average. A path that keeps the cores busy gets throughput in inverse proportion to its total, so a target of R× a baseline leaves the proxy at most (baseline total / R) − (load generator + server, as measured through the proxy) per operation: the allowance. Where the allowance is below what twemproxy spends for the same operations, no proxy of that design reaches the target on this machine; where it is above what emqproxy spends, the target is reachable. The last columns project the other way: the rate each path would reach with a core for each of its processes (one over the largest per-process CPU per operation, latency left out), and the target's ratio under that projection, i.e. on a machine where the proxy does not take the load generator's or the server's CPU.\n\n", runtime.NumCPU())
	w("| variant | path | load generator µs/op | proxy µs/op | server µs/op | total µs/op | cores busy | ceiling with a core each, ops/s |\n|---|---|---|---|---|---|---|---|\n")
	for _, v := range r.variants {
		for _, t := range r.ptTargets {
			s := r.ptSpend(v.name, t.name)
			w("| %s | %s | %.2f | %s | %.2f | %.2f | %.2f | %.0f |\n", v.name, t.name, s.us(s.load), proxyUs(s, t.pid != 0), s.us(s.server), s.total(), s.busy(), s.ceiling())
		}
	}
	for _, p := range r.pipelines {
		for _, t := range r.mixTargets {
			if t.name == mixAuditOn || t.name == mixAuditOff {
				continue // section 4 has them
			}
			s := r.mixSpend(p, t.name)
			w("| job mix P%d | %s | %.2f | %s | %.2f | %.2f | %.2f | %.0f |\n", p, t.name, s.us(s.load), proxyUs(s, t.pid != 0), s.us(s.server), s.total(), s.busy(), s.ceiling())
		}
	}

	direct, px, px1, twem := r.ptTargets[0].name, r.ptTargets[1].name, r.ptTargets[2].name, r.ptTargets[3].name
	w("\nThe throughput targets as CPU per operation (µs of proxy CPU per operation; \"spent\" is the measured figure):\n\n")
	w("| target | allowance for emqproxy | spent | allowance for Gn | Gn spent | twemproxy spent | emqproxy with a core each |\n|---|---|---|---|---|---|---|\n")
	for _, v := range r.variants {
		wantD, wantT := 0.85, 1.0
		if v.pipeline > 1 {
			wantD, wantT = 0.6, 1.5
		}
		d, e, e1, tw := r.ptSpend(v.name, direct), r.ptSpend(v.name, px), r.ptSpend(v.name, px1), r.ptSpend(v.name, twem)
		for _, c := range []struct {
			what  string
			base  spend
			ratio float64
		}{
			{fmt.Sprintf("passthrough %s ≥ %.2f× direct", v.name, wantD), d, wantD},
			{fmt.Sprintf("passthrough %s ≥ %.1f× twemproxy", v.name, wantT), tw, wantT},
		} {
			w("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", c.what, allowance(c.base, e, c.ratio), e.us(e.path),
				allowance(c.base, e1, c.ratio), e1.us(e1.path), tw.us(tw.path), ratio(e.ceiling(), c.base.ceiling()))
		}
	}
	for _, p := range r.pipelines {
		l, e, e1 := r.mixSpend(p, mixLua), r.mixSpend(p, mixProxy), r.mixSpend(p, mixProxy1)
		w("| job mix P%d ≥ 1.0× Lua | %.2f | %.2f | %.2f | %.2f | - | %s |\n", p, allowance(l, e, 1), e.us(e.path), allowance(l, e1, 1), e1.us(e1.path), ratio(e.ceiling(), l.ceiling()))
	}
}

func proxyUs(s spend, has bool) string {
	if !has {
		return "-"
	}
	return fmt.Sprintf("%.2f", s.us(s.path))
}
