package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ptVariant is one redis-benchmark shape.
type ptVariant struct {
	name     string
	pipeline int
	size     int
	n        int
}

// target is one address the load is sent to; pid is the process in the
// path that is not the server (0 for the server itself).
type target struct {
	name  string
	addr  string
	pid   int
	admin string // the proxy's admin listener, for its allocation count ("" = none)
	// unix is the same process's Unix socket listener (unix:/path; "" =
	// none), measured beside addr in section 1c.
	unix string
}

// ptResult is one redis-benchmark run (SET and GET).
type ptResult struct {
	rps    map[string]float64 // by test: SET, GET
	p50ms  map[string]float64
	ops    int64
	cpu    cpu // of the target's process (zero for direct)
	srvCPU cpu
	load   cpu // of redis-benchmark itself
	wall   time.Duration
	allocs float64 // the proxy's heap allocations over the run; -1 = not known
	srv    serverStats
}

// redisBenchmark runs one redis-benchmark against t and reads the CPU and
// the server counters around it.
func (r *runner) redisBenchmark(ctx context.Context, v ptVariant, t target) (ptResult, error) {
	host, port, _ := strings.Cut(t.addr, ":")
	argv := r.loadArgv([]string{r.redisBenchmarkBin, "-h", host, "-p", port, "-c", "50", "-n", strconv.Itoa(v.n),
		"-P", strconv.Itoa(v.pipeline), "-d", strconv.Itoa(v.size), "-t", "set,get", "--csv"})
	srvPID := r.module.PID()
	m0, hasM0 := mallocsOf(t.admin)
	c0, s0, st0, t0 := cpuOf(t.pid), cpuOf(srvPID), statsOf(r.module.Addr), time.Now()
	out, load, err := r.run(ctx, 5*time.Minute, argv...)
	c1, s1, st1, wall := cpuOf(t.pid), cpuOf(srvPID), statsOf(r.module.Addr), time.Since(t0)
	m1, hasM1 := mallocsOf(t.admin)
	if err != nil {
		return ptResult{}, err
	}
	res := ptResult{rps: map[string]float64{}, p50ms: map[string]float64{}, ops: 2 * int64(v.n),
		srvCPU: s1.sub(s0), srv: serverStats{st1.cmds - st0.cmds, st1.reads - st0.reads}, load: load, wall: wall, allocs: -1}
	if hasM0 && hasM1 {
		res.allocs = m1 - m0
	}
	if t.pid != 0 {
		res.cpu = c1.sub(c0)
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return ptResult{}, fmt.Errorf("redis-benchmark output: %w: %q", err, out)
	}
	for _, row := range rows {
		if len(row) < 5 || row[0] == "test" {
			continue
		}
		rps, err1 := strconv.ParseFloat(row[1], 64)
		p50, err2 := strconv.ParseFloat(row[4], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		res.rps[row[0]], res.p50ms[row[0]] = rps, p50
	}
	if res.rps["SET"] == 0 || res.rps["GET"] == 0 {
		return ptResult{}, fmt.Errorf("redis-benchmark against %s printed no SET/GET rates: %q", t.name, out)
	}
	return res, nil
}

// passthrough runs every variant against every target in every layout,
// reps times, interleaved (rep, layout, variant, target), then one
// evidence pass with perf in each layout. It leaves the run in the shared
// layout.
func (r *runner) passthrough(ctx context.Context, variants []ptVariant, targets []target) error {
	for rep := range r.reps {
		for _, l := range r.layouts {
			if err := r.inLayout(l); err != nil {
				return err
			}
			for _, v := range variants {
				for _, t := range targets {
					res, err := r.redisBenchmark(ctx, v, t)
					if err != nil {
						return err
					}
					r.logf("passthrough rep %d %-8s %-9s %-22s SET %9.0f GET %9.0f", rep+1, shortLayout(l), v.name, t.name, res.rps["SET"], res.rps["GET"])
					k := key2(v.name, t.name)
					l.res.pt[k] = append(l.res.pt[k], res)
				}
			}
		}
	}
	if r.perf == "" {
		return r.inLayout(r.shared())
	}
	for _, l := range r.layouts {
		if err := r.inLayout(l); err != nil {
			return err
		}
		for _, v := range variants {
			ev := v
			ev.n = max(v.n/4, 1000)
			for _, t := range targets {
				pids := []int{r.module.PID()}
				if t.pid != 0 {
					pids = append(pids, t.pid)
				}
				sc := r.countSyscalls(pids...)
				res, err := r.redisBenchmark(ctx, ev, t)
				counts := sc.stop()
				if err != nil {
					return err
				}
				e := evidence{ops: res.ops, srvSyscalls: -1, syscalls: -1}
				if len(counts) > 0 {
					e.srvSyscalls = counts[0]
				}
				if len(counts) > 1 {
					e.syscalls = counts[1]
				}
				l.res.ptEvidence[key2(v.name, t.name)] = e
			}
		}
	}
	return r.inLayout(r.shared())
}

// evidence is one perf pass: system calls over ops.
type evidence struct {
	ops                   int64
	syscalls, srvSyscalls int64 // -1 = not measured
}

func key2(a, b string) string { return a + "\x00" + b }
