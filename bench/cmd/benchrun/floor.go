package main

import (
	"context"
	"fmt"
)

// Section 1d: the floor of a Go data path at pipeline 1, 50 clients, in
// paired rounds. Issue 32 asks for emqproxy's processor time per call at
// or below twemproxy's; section 1 finds it at about twice. Two relays that
// parse nothing, each with a connection to the server per client, show
// where that comes from: goforward (bench/cmd/goforward) is emqproxy's
// design at its least (a goroutine per client, the runtime's poller),
// epollforward (bench/cmd/epollforward) an event loop in Go (one
// goroutine in epoll, no goroutine woken per call). Each round runs
// redis-benchmark `-c 50 -P 1 -t set,get` against every path, the order
// rotated, and reads each path's CPU from /proc/<pid>/stat around it.

// floorRoundsPerRep is the rounds per repetition (--reps).
const floorRoundsPerRep = 3

// floorRequests is each run's -n (per test: SET and GET).
const floorRequests = 50000

// floorResult is section 1d's: per path, each round's rate and CPU.
type floorResult struct {
	paths []string
	rps   map[string][]float64 // SET and GET averaged
	cpuOp map[string][]float64 // the path's process, µs per operation
}

// floor runs the rounds over paths (the direct path first).
func (r *runner) floor(ctx context.Context, paths []target) error {
	res := floorResult{rps: map[string][]float64{}, cpuOp: map[string][]float64{}}
	for _, t := range paths {
		res.paths = append(res.paths, t.name)
	}
	v := ptVariant{name: "P1 floor", pipeline: 1, size: 3, n: floorRequests}
	rounds := floorRoundsPerRep * r.reps
	for round := range rounds {
		line := ""
		for i := range paths {
			t := paths[(round+i)%len(paths)]
			pr, err := r.redisBenchmark(ctx, v, t)
			if err != nil {
				return err
			}
			rps := (pr.rps["SET"] + pr.rps["GET"]) / 2
			res.rps[t.name] = append(res.rps[t.name], rps)
			if t.pid != 0 {
				res.cpuOp[t.name] = append(res.cpuOp[t.name], float64((pr.cpu.user+pr.cpu.sys).Microseconds())/float64(pr.ops))
			}
			line += fmt.Sprintf("%s %.0f/s  ", t.name, rps)
		}
		r.logf("floor round %d/%d: %s", round+1, rounds, line)
	}
	r.fl = res
	return nil
}

// ratios returns, per round, a's figure over b's.
func ratios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// writeFloor writes section 1d; twem names twemproxy's path.
func (r *runner) writeFloor(w func(string, ...any), twem string) {
	f := r.fl
	if len(f.paths) == 0 {
		return
	}
	w("\n## 1d. The floor of a Go data path at pipeline 1, 50 clients, in paired rounds (issue 32's processor-time target)\n\n")
	w("%d rounds. Each round runs redis-benchmark `-c 50 -P 1 -t set,get -n %d` against every path in turn, the order rotated each round; a path's CPU is its process's, from /proc/<pid>/stat around the run, per operation (SET and GET). Medians over the rounds, with their range; the ratios are each round's own. `goforward` is emqproxy's design at its least: a goroutine per client and the runtime's network poller, a read and a write on each side per call and nothing parsed. `epollforward` (bench/cmd/epollforward) is an event loop in Go: one goroutine in epoll on every socket, no goroutine woken per call, the same reads and writes. Both open a connection to the server per client (twemproxy and emqproxy carry every client on one), so the server works harder behind them.\n\n",
		len(f.rps[f.paths[0]]), floorRequests)
	w("| path | ops/s | over twemproxy's, per round | CPU µs/op | over twemproxy's, per round |\n|---|---|---|---|---|\n")
	for _, p := range f.paths {
		vs, cvs := "-", "-"
		if p != twem {
			vs = spreadPrec(ratios(f.rps[p], f.rps[twem]), 2)
			if len(f.cpuOp[p]) > 0 {
				cvs = spreadPrec(ratios(f.cpuOp[p], f.cpuOp[twem]), 2)
			}
		}
		w("| %s | %s | %s | %s | %s |\n", p, spread(f.rps[p]), vs, spreadPrec(f.cpuOp[p], 2), cvs)
	}
}

// floorPaths starts goforward and epollforward in front of direct's
// server and runs the rounds over direct, emqproxy, twemproxy and both.
func (r *runner) floorPaths(ctx context.Context, direct, px, twem target) error {
	paths := []target{direct, px, twem}
	for _, f := range []struct{ name, bin string }{{"goforward", r.goforwardBin}, {"epollforward", r.epollforwardBin}} {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		p, err := r.startProc(f.name, addr, answersPing, nil, f.bin, "--listen", addr, "--upstream", direct.addr)
		if err != nil {
			return err
		}
		defer p.stop()
		paths = append(paths, target{name: f.name, addr: p.addr, pid: p.pid()})
	}
	return r.floor(ctx, paths)
}

// floorOnly runs section 1d alone (--only floor), with a module node,
// emqproxy with its defaults and twemproxy, as the full run has them.
func (r *runner) floorOnly(ctx context.Context, kind proxyKind) error {
	return r.withPaths(ctx, kind, r.floorPaths)
}

// floorChecks are the same two targets from section 1d's paired rounds:
// the median over the rounds of each round's own ratio, which the
// machine's state (section 1's three repetitions a minute apart land on
// different levels of it) cancels from.
func (r *runner) floorChecks(px, twem string) []check {
	f := r.fl
	if len(f.cpuOp[px]) == 0 || len(f.cpuOp[twem]) == 0 {
		return nil
	}
	c, t := ratios(f.cpuOp[px], f.cpuOp[twem]), ratios(f.rps[px], f.rps[twem])
	return []check{
		{"the same, in paired rounds (section 1d): proxy CPU per call ≤ twemproxy's",
			fmt.Sprintf("%.2f µs vs %.2f µs; the rounds' ratio %s", median(f.cpuOp[px]), median(f.cpuOp[twem]), spreadPrec(c, 2)), median(c) <= 1},
		{"the same, in paired rounds (section 1d): throughput ≥ twemproxy's",
			fmt.Sprintf("the rounds' ratio %s", spreadPrec(t, 2)), median(t) >= 1},
	}
}
