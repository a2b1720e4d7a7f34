package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Section 1e: what a rewrite costs the proxy, in paired rounds. Issue 49
// asks for the proxy's CPU per rewritten call at most that of the same
// call passed through, plus 3 µs. The two calls go through the same
// emqproxy process to the same module node: the legacy client's
// `EVALSHA <enqueue> 2 k1 k2 id payload` (looked up, rewritten to
// EMQ.ENQUEUE, audited) and `EMQ.ENQUEUE 2 k1 k2 id payload` with the same
// tail (planned and passed through, not audited). Each round runs
// redis-benchmark with 50 clients at pipeline 1 and 16 for both calls in
// turn, the order rotated each round, and reads the proxy's CPU from
// /proc/<pid>/stat around each run; the figure is the median over the
// rounds of each round's own difference, which the machine's state
// cancels from. Measured in each layout.

// rewriteRoundsPerRep is the rounds per repetition (--reps).
const rewriteRoundsPerRep = 3

// rewriteRequests is each run's -n at pipeline p: a second or two.
func rewriteRequests(p int) int {
	if p == 1 {
		return 40_000
	}
	return 200_000
}

// rewritePipelines are the pipelines section 1e measures.
var rewritePipelines = []int{1, 16}

// rewriteResult is section 1e's in one layout: the proxy's CPU per call
// (µs), one per round, by pipeline and call ("rewritten", "passed").
type rewriteResult struct {
	cpuOp map[string][]float64
}

// rewriteCost runs section 1e's rounds against px (emqproxy in front of
// the module node) in every layout. It leaves the run in the shared
// layout.
func (r *runner) rewriteCost(ctx context.Context, px target) error {
	sha, err := r.enqueueSHA()
	if err != nil {
		return err
	}
	// One job id, enqueued again and again (as section 1b): after the
	// first the module answers 0, the same work for both calls.
	tail := []string{"2", "emq:{rwq}:job:J1", "emq:{rwq}:pending", "J1", "payload"}
	calls := []struct {
		name string
		args []string
	}{
		{"rewritten", append([]string{"EVALSHA", sha}, tail...)},
		{"passed", append([]string{"EMQ.ENQUEUE"}, tail...)},
	}
	for _, l := range r.layouts {
		l.res.rw = rewriteResult{cpuOp: map[string][]float64{}}
	}
	rounds := rewriteRoundsPerRep * r.reps
	for round := range rounds {
		for _, l := range r.layouts {
			if err := r.inLayout(l); err != nil {
				return err
			}
			line := ""
			for _, p := range rewritePipelines {
				for i := range calls {
					c := calls[(round+i)%len(calls)]
					us, err := r.proxyCPUPerCall(ctx, px, p, c.args)
					if err != nil {
						return err
					}
					k := key2(strconv.Itoa(p), c.name)
					l.res.rw.cpuOp[k] = append(l.res.rw.cpuOp[k], us)
					line += fmt.Sprintf("P%d %s %.2f µs  ", p, c.name, us)
				}
			}
			r.logf("rewrite cost %s round %d/%d: %s", shortLayout(l), round+1, rounds, line)
		}
	}
	return r.inLayout(r.shared())
}

// proxyCPUPerCall runs redis-benchmark (50 clients, pipeline p) sending
// args through t, and returns t's process CPU per call in µs.
func (r *runner) proxyCPUPerCall(ctx context.Context, t target, p int, args []string) (float64, error) {
	host, port, _ := strings.Cut(t.addr, ":")
	n := rewriteRequests(p)
	argv := append([]string{r.redisBenchmarkBin, "-h", host, "-p", port, "-c", "50", "-n", strconv.Itoa(n), "-P", strconv.Itoa(p), "--csv"}, args...)
	c0 := cpuOf(t.pid)
	out, _, err := r.run(ctx, 5*time.Minute, r.loadArgv(argv)...)
	c1 := cpuOf(t.pid)
	if err != nil {
		return 0, err
	}
	if !strings.Contains(string(out), `"`+args[0]) {
		return 0, fmt.Errorf("redis-benchmark sending %s through %s printed no rate: %q", args[0], t.name, out)
	}
	d := c1.sub(c0)
	return float64((d.user + d.sys).Microseconds()) / float64(n), nil
}

// rewriteAdded returns, per round, the rewritten call's CPU minus the
// passed-through call's at pipeline p.
func (s rewriteResult) rewriteAdded(p int) []float64 {
	return diffs(s.cpuOp[key2(strconv.Itoa(p), "rewritten")], s.cpuOp[key2(strconv.Itoa(p), "passed")])
}

// writeRewriteCost writes section 1e, a table per layout.
func (r *runner) writeRewriteCost(w func(string, ...any)) {
	measured := r.layoutsThat(func(s *results) bool { return len(s.rw.cpuOp) > 0 })
	if len(measured) == 0 {
		return
	}
	w("\n## 1e. What a rewrite costs the proxy, in paired rounds (issue 49's CPU target)\n\n")
	w("Through the same emqproxy to the same module node, 50 clients: redis-benchmark sending the legacy `EVALSHA <enqueue> 2 emq:{rwq}:job:J1 emq:{rwq}:pending J1 payload` (rewritten to EMQ.ENQUEUE, audited) and `EMQ.ENQUEUE` with the same tail (passed through), in turn, the order rotated each round; `-n %d` at pipeline 1, %d at 16. The proxy's CPU is its process's, from /proc/<pid>/stat around each run, per call. Medians over the rounds, with their range; \"added\" is each round's own difference.\n",
		rewriteRequests(1), rewriteRequests(16))
	for _, l := range measured {
		w("\n### 1e, %s\n\nHow: %s.\n\n", l.name, l.how(r.cpus))
		w("| pipeline | rewritten, proxy CPU µs/call | passed through | added by the rewrite |\n|---|---|---|---|\n")
		for _, p := range rewritePipelines {
			s := l.res.rw
			w("| %d | %s | %s | %s |\n", p, spreadPrec(s.cpuOp[key2(strconv.Itoa(p), "rewritten")], 2),
				spreadPrec(s.cpuOp[key2(strconv.Itoa(p), "passed")], 2), spreadPrec(s.rewriteAdded(p), 2))
		}
	}
}

// rewriteChecks is issue 49's CPU target from section 1e, in each layout
// measured.
func (r *runner) rewriteChecks() []check {
	var cs []check
	for _, l := range r.layouts {
		for _, p := range rewritePipelines {
			d := l.res.rw.rewriteAdded(p)
			if len(d) == 0 {
				continue
			}
			cs = append(cs, check{fmt.Sprintf("%s: P%d proxy CPU per rewritten call ≤ the same call passed through + 3 µs (section 1e, paired rounds)", l.name, p),
				fmt.Sprintf("%s µs added", spreadPrec(d, 2)), median(d) <= 3})
		}
	}
	return cs
}

// rewriteOnly runs section 1e alone (--only rewrite).
func (r *runner) rewriteOnly(ctx context.Context, kind proxyKind) error {
	return r.withPaths(ctx, kind, func(ctx context.Context, _, px, _ target) error { return r.rewriteCost(ctx, px) })
}
