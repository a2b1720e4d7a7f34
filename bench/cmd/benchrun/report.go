package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func itoa(n int) string { return strconv.Itoa(n) }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func kops(x float64) string { return fmt.Sprintf("%.0f", x) }

// ptMedian is the median ops/s of one test over the reps.
func (s *results) ptMedian(variant, tgt, test string) float64 {
	var xs []float64
	for _, res := range s.pt[key2(variant, tgt)] {
		xs = append(xs, res.rps[test])
	}
	return median(xs)
}

// mixMedian is the median ops/s of the job mix at pipeline p over the reps.
func (s *results) mixMedian(p int, tgt string) float64 {
	var xs []float64
	for _, res := range s.mixRes[key2(itoa(p), tgt)] {
		xs = append(xs, res.OpsPerSec)
	}
	return median(xs)
}

// check is one target (issue 15's; the tables show every figure).
type check struct {
	what, got string
	ok        bool
}

// checks are the targets: 50 clients at pipeline 1 at least 0.85× direct
// and 1.0× twemproxy; pipeline 16 at least 1.5× twemproxy; the legacy job
// mix at pipeline 16 at least Lua's rate; the latency targets (latChecks);
// idle memory and the audit log's cost.
func (r *runner) checks() []check {
	var cs []check
	direct, twem := r.ptTargets[0].name, r.ptTargets[3].name
	for _, px := range []string{r.ptTargets[1].name, r.ptTargets[2].name} {
		for _, v := range r.variants {
			minD, minT := 1e9, 1e9
			var gotD, gotT []string
			for _, test := range []string{"SET", "GET"} {
				p, d, t := r.ptMedian(v.name, px, test), r.ptMedian(v.name, direct, test), r.ptMedian(v.name, twem, test)
				if d > 0 && t > 0 {
					minD, minT = min(minD, p/d), min(minT, p/t)
				}
				gotD = append(gotD, test+" "+ratio(p, d))
				gotT = append(gotT, test+" "+ratio(p, t))
			}
			if v.pipeline == 1 {
				cs = append(cs, check{fmt.Sprintf("passthrough %s 50 clients, %s ≥ 0.85× direct", v.name, px), strings.Join(gotD, ", "), minD >= 0.85})
				cs = append(cs, check{fmt.Sprintf("passthrough %s 50 clients, %s ≥ 1.0× twemproxy", v.name, px), strings.Join(gotT, ", "), minT >= 1.0})
			} else {
				cs = append(cs, check{fmt.Sprintf("passthrough %s, %s ≥ 1.5× twemproxy", v.name, px), strings.Join(gotT, ", "), minT >= 1.5})
			}
		}
	}
	cs = append(cs, r.latChecks()...)
	for _, px := range []string{mixProxy, mixProxy1} {
		a, l := r.mixMedian(16, px), r.mixMedian(16, mixLua)
		cs = append(cs, check{fmt.Sprintf("job mix P16, %s ≥ 1.0× Lua", px), ratio(a, l), l > 0 && a/l >= 1.0})
	}
	per := r.idle.perConn()
	cs = append(cs, check{"idle memory ≤ 16 KiB per client", fmt.Sprintf("%.1f KiB", per/1024), per <= 16*1024})
	for _, p := range r.pipelines {
		on, off := r.mixMedian(p, mixAuditOn), r.mixMedian(p, mixAuditOff)
		cost := 0.0
		if off > 0 {
			cost = 1 - on/off
		}
		cs = append(cs, check{fmt.Sprintf("audit log costs ≤ 10%% at P%d", p), fmt.Sprintf("%.1f%%", 100*cost), off > 0 && cost <= 0.10})
	}
	for _, p := range r.pipelines {
		on, off := r.mixMedian(p, mixCapture), r.mixMedian(p, mixProxy)
		if on == 0 {
			continue
		}
		cost := 1 - on/off
		cs = append(cs, check{fmt.Sprintf("capture costs ≤ 10%% at P%d", p), fmt.Sprintf("%.1f%%", 100*cost), off > 0 && cost <= 0.10})
	}
	if rr := r.replay; rr.calls > 0 {
		cs = append(cs, check{"replay ≥ 20k calls/s per side", fmt.Sprintf("%.0f", rr.perSecond()), rr.err == nil && rr.perSecond() >= 20000})
	}
	return cs
}

func (r *runner) writeReport(stem string) error {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmark run %s\n\n", stem)
	w("One run on one machine: every ratio compares numbers measured side by side in this run, against the same server, by the same client. Medians of %d interleaved repetitions. See [bench/README.md](../README.md) for what each number means.\n\n", r.reps)
	w("| | |\n|---|---|\n")
	for _, kv := range r.machineInfo() {
		w("| %s | %s |\n", kv[0], strings.ReplaceAll(kv[1], "|", "/"))
	}
	w("\n")
	for _, n := range r.notes {
		w("- Note: %s\n", n)
	}
	if len(r.notes) > 0 {
		w("\n")
	}
	r.writeLayouts(w)
	summary := b.Len()

	r.writeLayoutRatios(w)
	if cs := r.checks49(); len(cs) > 0 {
		writeChecks(w, "\n## Targets (issue 49: laid out like a deployment)", "measured", cs)
	}
	writeChecks(w, "\n## Targets (issue 15; shared layout)", "measured", r.checks())
	writeChecks(w, "\n## Targets (issue 32: the cost of a call; shared layout)", "measured, against its anchor in this run", r.checks32())
	r.writePassthrough(w)
	r.writeLatency(w)
	if len(r.ptTargets) == 4 {
		r.writeOneClient(w, r.ptTargets[3].name)
		r.writeFloor(w, r.ptTargets[3].name)
		r.writeRewriteCost(w)
	}
	r.writeMix(w)
	r.writeBudget(w)
	r.writeAck(w)
	r.writeFloods(w)
	tables := b.String()[summary:]

	w("\n## 3. Idle memory\n\n")
	w("A fresh proxy; %d client connections each send one PING and read PONG, then stay idle. VmRSS from /proc/<pid>/status once it settles.\n\n", r.idle.conns)
	w("| RSS before | RSS with %d idle clients | per client |\n|---|---|---|\n", r.idle.conns)
	w("| %.1f MiB | %.1f MiB | %.1f KiB |\n", float64(r.idle.before)/(1<<20), float64(r.idle.after)/(1<<20), r.idle.perConn()/1024)

	w("\n## 5. CPU profiles\n\n")
	for _, p := range r.profiles {
		w("### %s\n\nFile: [`%s`](%s) (`go tool pprof -top %s`)\n\n```\n", p.name, p.text, p.text, p.text)
		out, _, err := r.run(context.Background(), 2*time.Minute, "go", "tool", "pprof", "-top", "-nodecount=30", filepath.Join(r.out, p.text))
		if err != nil {
			w("pprof failed: %v\n", err)
		}
		w("%s```\n\n", out)
		out, _, err = r.run(context.Background(), 2*time.Minute, "go", "tool", "pprof", "-top", "-cum", "-nodecount=30", filepath.Join(r.out, p.text))
		if err != nil {
			w("pprof failed: %v\n", err)
		}
		w("By cumulative time:\n\n```\n%s```\n\n", out)
	}

	w("\n## Commands\n\nEvery command line this run executed (ports are the free loopback ports of this run):\n\n```\n")
	for _, c := range r.cmds {
		w("%s\n", c)
	}
	w("```\n\nGenerated configurations:\n\n")
	for _, c := range r.configs {
		w("%s:\n\n```yaml\n%s```\n\n", c.name, c.text)
	}

	text := b.String()
	for _, name := range []string{stem + ".md", "latest.md"} {
		if err := os.WriteFile(filepath.Join(r.out, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	fmt.Print(tables)
	fmt.Printf("\nwritten: %s and %s\n", filepath.Join(r.out, stem+".md"), filepath.Join(r.out, "latest.md"))
	return nil
}

func (r *runner) writePassthrough(w func(string, ...any)) {
	w("\n## 1. Passthrough (redis-benchmark, 50 clients, SET and GET, ops/s)\n\n")
	w("`emqproxy` runs with its defaults (GOMAXPROCS 1); `Gn` is emqproxy with GOMAXPROCS set to the number of cores (Go's own default). Ratios: emqproxy over direct, twemproxy over direct, emqproxy over twemproxy. Measured in each layout, the layouts interleaved by repetition (rep → layout → variant → path).\n")
	for _, l := range r.layouts {
		if len(l.res.pt) == 0 {
			continue
		}
		w("\n### 1, %s\n\nHow: %s.\n\n", l.name, l.how(r.cpus))
		r.writePassthroughTables(w, l.res)
	}
}

// writePassthroughTables writes one layout's passthrough tables.
func (r *runner) writePassthroughTables(w func(string, ...any), res *results) {
	t := r.ptTargets
	d, p, p1, tw := t[0].name, t[1].name, t[2].name, t[3].name
	w("| variant | test | direct | emqproxy | Gn | twemproxy | proxy/direct | Gn/direct | twem/direct | proxy/twem | Gn/twem |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range r.variants {
		for _, test := range []string{"SET", "GET"} {
			vd, vp, v1, vt := res.ptMedian(v.name, d, test), res.ptMedian(v.name, p, test), res.ptMedian(v.name, p1, test), res.ptMedian(v.name, tw, test)
			w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.name, test, kops(vd), kops(vp), kops(v1), kops(vt),
				ratio(vp, vd), ratio(v1, vd), ratio(vt, vd), ratio(vp, vt), ratio(v1, vt))
		}
	}
	w("\nWhere the time goes (all reps summed; CPU from /proc/<pid>/stat, so ±10 ms per run; `cmds/read` is the server's total_commands_processed over total_reads_processed: how many commands each read of the server's socket carried, i.e. how well the path pipelines; syscalls from a separate pass at a quarter of the requests under `perf stat -e raw_syscalls:sys_enter`; allocs/op is the emqproxy process's go_memstats_mallocs_total, read from its admin /metrics before and after each run):\n\n")
	w("| variant | path | path CPU µs/op (sys share) | server CPU µs/op | server cmds/read | path syscalls/op | server syscalls/op | path allocs/op |\n|---|---|---|---|---|---|---|---|\n")
	for _, v := range r.variants {
		for _, tg := range t {
			var c, s cpu
			var ops, cmds, reads, allocOps int64
			allocs := 0.0
			for _, pr := range res.pt[key2(v.name, tg.name)] {
				c.user, c.sys = c.user+pr.cpu.user, c.sys+pr.cpu.sys
				s.user, s.sys = s.user+pr.srvCPU.user, s.sys+pr.srvCPU.sys
				ops += pr.ops
				cmds += pr.srv.cmds
				reads += pr.srv.reads
				if pr.allocs >= 0 {
					allocs += pr.allocs
					allocOps += pr.ops
				}
			}
			e, hasE := res.ptEvidence[key2(v.name, tg.name)]
			w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", v.name, tg.name, cpuPerOp(c, ops, tg.pid != 0), cpuPerOp(s, ops, true),
				ratio(float64(cmds), float64(reads)), perOp(e.syscalls, e.ops, hasE), perOp(e.srvSyscalls, e.ops, hasE),
				perOp(int64(allocs), allocOps, allocOps > 0))
		}
	}
}

func cpuPerOp(c cpu, ops int64, has bool) string {
	if !has || ops == 0 {
		return "-"
	}
	tot := c.user + c.sys
	share := 0.0
	if tot > 0 {
		share = float64(c.sys) / float64(tot)
	}
	return fmt.Sprintf("%.2f (%.0f%%)", float64(tot.Nanoseconds())/1e3/float64(ops), 100*share)
}

func perOp(n, ops int64, has bool) string {
	if !has || n < 0 || ops == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(ops))
}

func (r *runner) writeMix(w func(string, ...any)) {
	w("\n## 2. Legacy job mix (50 clients, each on its own queue: enqueue → claim → complete; ops/s = script calls per second)\n\n")
	w("Lua: the legacy client directly on a scripts node. emqproxy: the same client through the proxy to a module node (its defaults; Gn: GOMAXPROCS set to the number of cores). native: EMQ.* sent directly to the module node (the limit). Window %v after %v warmup. Measured in each layout, the layouts interleaved by repetition (rep → layout → pipeline → path); a pinned layout runs these four paths, the shared one every path of sections 2, 4 and 6.\n\n", r.mixDur, r.mixWarmup)
	w("The mix reports one rate over its three calls (each client makes one enqueue, one claim and one complete per cycle, so the rate of each verb is a third of it and its ratio is the mix's), and the round trip of the enqueue and of a worker's claim + complete apart; extend, fail and retry are not in the mix.\n")
	for _, l := range r.layouts {
		if len(l.res.mixRes) == 0 {
			continue
		}
		w("\n### 2, %s\n\nHow: %s.\n\n", l.name, l.how(r.cpus))
		r.writeMixTables(w, l.res)
	}
	w("\n## 4. The audit log's cost (job mix, 50 clients)\n\n")
	w("How: %s (%s).\n\n", r.shared().name, r.shared().how(r.cpus))
	w("Both sides run bench/cmd/proxyd, the same data path: \"on\" writes every rewrite record as JSON to a buffered file, as the binary's file sink does; \"off\" passes no audit logger at all, so no record is built or encoded. The binary has no off switch (its sinks are stderr, stdout or a file), hence proxyd.\n\n")
	w("Throughput is the target's measure; the proxy's CPU per call beside it is the steadier one (the same figures as in the job mix's CPU table): what writing one record costs the proxy, whatever else the machine was doing.\n\n")
	w("| pipeline | audit on | audit off | cost | proxy CPU µs/call on | off | per record |\n|---|---|---|---|---|---|---|\n")
	for _, p := range r.pipelines {
		on, off := r.mixMedian(p, mixAuditOn), r.mixMedian(p, mixAuditOff)
		cost := "n/a"
		if off > 0 {
			cost = fmt.Sprintf("%.1f%%", 100*(1-on/off))
		}
		son, soff := r.mixSpend(p, mixAuditOn), r.mixSpend(p, mixAuditOff)
		w("| %d | %s | %s | %s | %.2f | %.2f | %.2f |\n", p, kops(on), kops(off), cost,
			son.us(son.path), soff.us(soff.path), son.us(son.path)-soff.us(soff.path))
	}
	r.writeCapture(w)
}

// writeMixTables writes one layout's job mix tables: the rates and their
// ratios, the CPU per call, each call's round trip, one client's latency.
func (r *runner) writeMixTables(w func(string, ...any), res *results) {
	w("| pipeline | Lua | emqproxy | Gn | native | proxy/Lua | Gn/Lua | proxy/native | Gn/native | Lua/native |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.pipelines {
		l, x, x1, n := res.mixMedian(p, mixLua), res.mixMedian(p, mixProxy), res.mixMedian(p, mixProxy1), res.mixMedian(p, mixNative)
		w("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p, kops(l), kops(x), kops(x1), kops(n),
			ratio(x, l), ratio(x1, l), ratio(x, n), ratio(x1, n), ratio(l, n))
	}
	w("\nEach call's round trip, 50 clients (medians over the repetitions of each run's p50 and p99, µs; at pipeline 16 a round trip carries 16 calls; a legacy claim includes its pause read; `Lua/proxy` over 1 means the call is quicker through the proxy than on Lua):\n\n")
	w("| pipeline | path | enqueue p50 | p99 | claim + complete p50 | p99 | enqueue Lua/path | claim + complete Lua/path |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range r.pipelines {
		le, ll := res.mixRoundTrips(p, mixLua)
		for _, t := range r.mixTargets {
			if len(res.mixRes[key2(itoa(p), t.name)]) == 0 || !slices.Contains(pinnedTargets, t.name) {
				continue
			}
			e, l := res.mixRoundTrips(p, t.name)
			w("| %d | %s | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", p, t.name, e.p50, e.p99, l.p50, l.p99, ratio(le.p50, e.p50), ratio(ll.p50, l.p50))
		}
	}
	w("\nWhere the time goes (all reps summed; ops estimated as ops/s × (warmup + window), so CPU per op is approximate; `calls/server read` is script calls per read of the server's sockets (the legacy client's pause reads are reads too): how many calls each read carried; allocs/call from the emqproxy process's go_memstats_mallocs_total, as in section 1):\n\n")
	w("| pipeline | path | proxy CPU µs/op (sys share) | server CPU µs/op | calls/server read | proxy allocs/call |\n|---|---|---|---|---|---|\n")
	for _, p := range r.pipelines {
		for _, t := range r.mixTargets {
			runs := res.mixRes[key2(itoa(p), t.name)]
			if len(runs) == 0 {
				continue
			}
			var c, s cpu
			var ops, allocs, allocOps float64
			var reads int64
			for _, mr := range runs {
				c.user, c.sys = c.user+mr.cpu.user, c.sys+mr.cpu.sys
				s.user, s.sys = s.user+mr.srvCPU.user, s.sys+mr.srvCPU.sys
				n := mr.OpsPerSec * (r.mixWarmup + r.mixDur).Seconds()
				ops += n
				reads += mr.srv.reads
				if mr.allocs >= 0 {
					allocs += mr.allocs
					allocOps += n
				}
			}
			w("| %d | %s | %s | %s | %s | %s |\n", p, t.name, cpuPerOp(c, int64(ops), t.pid != 0), cpuPerOp(s, int64(ops), true),
				ratio(ops, float64(reads)), perOp(int64(allocs), int64(allocOps), allocOps > 0))
		}
	}
	w("\nSingle client, pipeline 1 (latency of one script call; a legacy claim includes its pause read):\n\n")
	w("| path | ops/s | p50 µs | p99 µs |\n|---|---|---|---|\n")
	for _, t := range r.mixTargets {
		l, ok := res.latency[t.name]
		if !ok {
			continue
		}
		w("| %s | %.0f | %.0f | %.0f |\n", t.name, l.OpsPerSec, l.P50us, l.P99us)
	}
}

// mixRoundTrips is the median over the repetitions of the job mix's
// enqueue and claim + complete round trips at pipeline p through tgt.
func (s *results) mixRoundTrips(p int, tgt string) (enq, loop latPoint) {
	var e50, e99, l50, l99 []float64
	for _, res := range s.mixRes[key2(itoa(p), tgt)] {
		e50, e99 = append(e50, res.EnqueueP50us), append(e99, res.EnqueueP99us)
		l50, l99 = append(l50, res.LoopP50us), append(l99, res.LoopP99us)
	}
	return latPoint{median(e50), median(e99)}, latPoint{median(l50), median(l99)}
}

// writeCapture writes section 6: capture on against off, and the replay.
func (r *runner) writeCapture(w func(string, ...any)) {
	w("\n## 6. Capture and replay (job mix, 50 clients)\n\n")
	w("How: %s (%s).\n\n", r.shared().name, r.shared().how(r.cpus))
	w("\"on\" is the binary with `capture.queues: [\"*\"]` (redaction on, a buffered file per 64 MiB), \"off\" the same binary without a capture (%s). The replay runs the capture's first file with `verify --replay` on two fresh nodes (a scripts node and a module node), queues in parallel.\n\n", mixProxy)
	w("Throughput is the target's measure; the proxy's CPU per call beside it (summed over the repetitions, as in the audit log's table) is the steadier one when other work shares the machine.\n\n")
	w("| pipeline | capture on | capture off | cost | proxy CPU µs/call on | off | per record |\n|---|---|---|---|---|---|---|\n")
	for _, p := range r.pipelines {
		on, off := r.mixMedian(p, mixCapture), r.mixMedian(p, mixProxy)
		cost := "n/a"
		if off > 0 && on > 0 {
			cost = fmt.Sprintf("%.1f%%", 100*(1-on/off))
		}
		son, soff := r.mixSpend(p, mixCapture), r.mixSpend(p, mixProxy)
		w("| %d | %s | %s | %s | %.2f | %.2f | %.2f |\n", p, kops(on), kops(off), cost,
			son.us(son.path), soff.us(soff.path), son.us(son.path)-soff.us(soff.path))
	}
	if rr := r.replay; rr.err != nil {
		w("\nreplay: not measured: %v\n", rr.err)
	} else {
		w("\nreplay: %d calls in %v: %.0f calls/s per side (nodes agree: %v)\n", rr.calls, rr.elapsed.Round(time.Millisecond), rr.perSecond(), rr.ok)
	}
}

// writeChecks writes a table of targets under title, each met or missed.
func writeChecks(w func(string, ...any), title, measured string, cs []check) {
	w("%s\n\n| target | %s | |\n|---|---|---|\n", title, measured)
	for _, c := range cs {
		mark := "met"
		if !c.ok {
			mark = "**missed**"
		}
		w("| %s | %s | %s |\n", c.what, c.got, mark)
	}
}
