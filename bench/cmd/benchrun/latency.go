package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/shamap"
)

// The latency section: what one hop adds to one call at pipeline 1, the
// figure a job worker (one call at a time) feels, at a few client counts.
// GET goes through redis-benchmark to the module node directly, through
// emqproxy and through twemproxy; the worker's calls go through the job
// mix's clients: the legacy client through emqproxy to the module node,
// against the same calls as EMQ.* sent directly (with the legacy client's
// pause read, so both sides make the same round trips). twemproxy cannot
// carry the worker's calls (it refuses the module's commands and SCRIPT
// LOAD), so a worker's hop is read against twemproxy's GET hop: a hop is a
// hop.

// latClients are the client counts of the latency curve.
var latClients = []int{1, 4, 16}

// latPoint is one run's latency percentiles, in microseconds.
type latPoint struct{ p50, p99 float64 }

// latGetRequests is the GET requests per run at c clients: about a second
// at pipeline 1 on a 2-core machine.
func latGetRequests(c int) int { return 10_000 * (c + 1) }

// latencyCurve measures GET, the enqueue and the worker's calls at each
// client count, r.reps times, interleaved over the targets.
func (r *runner) latencyCurve(ctx context.Context, gets []target, loops []mixTarget) error {
	enqSHA, err := r.enqueueSHA()
	if err != nil {
		return err
	}
	// One job id, enqueued again and again: after the first the module
	// answers 0 (already queued), the same work on both sides. (A random
	// id per call is not possible: redis-benchmark draws each placeholder
	// apart, and the shape ties the id to its key.)
	tail := []string{"2", "emq:{latq}:job:J1", "emq:{latq}:pending", "J1", "payload"}
	for rep := range r.reps {
		for _, c := range latClients {
			for _, t := range gets {
				p, err := r.latGet(ctx, t, c)
				if err != nil {
					return err
				}
				r.logf("latency rep %d GET %2d clients %-22s p50 %4.0f us p99 %5.0f us", rep+1, c, t.name, p.p50, p.p99)
				k := key2(itoa(c), t.name)
				r.latGets[k] = append(r.latGets[k], p)
			}
			for i, t := range gets[:3] { // direct, emqproxy, Gn: twemproxy refuses both forms
				args := append([]string{"EVALSHA", enqSHA}, tail...)
				if i == 0 {
					args = append([]string{"EMQ.ENQUEUE"}, tail...)
				}
				p, err := r.latGet(ctx, t, c, args...)
				if err != nil {
					return err
				}
				r.logf("latency rep %d enqueue %2d clients %-22s p50 %4.0f us p99 %5.0f us", rep+1, c, t.name, p.p50, p.p99)
				k := key2(itoa(c), t.name)
				r.latEnq[k] = append(r.latEnq[k], p)
			}
			for _, t := range loops {
				res, err := r.jobmixOnce(ctx, t, c, 1, r.mixWarmup/2, r.latDur)
				if err != nil {
					return err
				}
				r.logf("latency rep %d job %2d clients %-32s enqueue p50 %4.0f us, claim+complete p50 %4.0f us", rep+1, c, t.name, res.EnqueueP50us, res.LoopP50us)
				k := key2(itoa(c), t.name)
				r.latLoops[k] = append(r.latLoops[k], res)
			}
		}
	}
	return nil
}

// enqueueSHA is the sha the stand's map pins the legacy enqueue script to.
func (r *runner) enqueueSHA() (string, error) {
	m, err := shamap.Load(filepath.Join(r.root, "stand", "map.yaml"))
	if err != nil {
		return "", err
	}
	for _, s := range m.Scripts {
		if s.Verb == "ENQUEUE" {
			return s.SHA, nil
		}
	}
	return "", fmt.Errorf("the stand's map pins no ENQUEUE script")
}

// latGet runs redis-benchmark at pipeline 1 with c clients against t: its
// GET test, or the command args.
func (r *runner) latGet(ctx context.Context, t target, c int, args ...string) (latPoint, error) {
	host, port, _ := strings.Cut(t.addr, ":")
	argv := []string{r.redisBenchmarkBin, "-h", host, "-p", port}
	if sock, ok := strings.CutPrefix(t.addr, "unix:"); ok {
		argv = []string{r.redisBenchmarkBin, "-s", sock}
	}
	argv = append(argv, "-c", itoa(c), "-n", itoa(latGetRequests(c)), "-P", "1", "--csv")
	if len(args) == 0 {
		argv = append(argv, "-t", "get")
	} else {
		argv = append(argv, args...)
	}
	// A bound, not a measure: generous, as a load generator pinned to one
	// CPU beside the proxy takes far longer on a machine that other work
	// keeps busy.
	out, _, err := r.run(ctx, max(r.latDur*20, 2*time.Minute), r.loadArgv(argv)...)
	if err != nil {
		return latPoint{}, err
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return latPoint{}, fmt.Errorf("redis-benchmark output: %w: %q", err, out)
	}
	for _, row := range rows {
		// test, rps, avg, min, p50, p95, p99, max (milliseconds)
		if len(row) < 7 || row[0] == "test" || (len(args) == 0 && row[0] != "GET") {
			continue
		}
		p50, err1 := strconv.ParseFloat(row[4], 64)
		p99, err2 := strconv.ParseFloat(row[6], 64)
		if err1 == nil && err2 == nil {
			return latPoint{p50 * 1000, p99 * 1000}, nil
		}
	}
	return latPoint{}, fmt.Errorf("redis-benchmark against %s printed no latency: %q", t.name, out)
}

// latGetMedian is the median GET p50 and p99 at c clients through tgt.
func (r *runner) latGetMedian(c int, tgt string) latPoint { return latMedian(r.latGets, c, tgt) }

// latEnqMedian is the median enqueue p50 and p99 (redis-benchmark) at c
// clients through tgt.
func (r *runner) latEnqMedian(c int, tgt string) latPoint { return latMedian(r.latEnq, c, tgt) }

// latMedian is the median p50 and p99 of the runs in m at c clients
// through tgt.
func latMedian(m map[string][]latPoint, c int, tgt string) latPoint {
	var p50, p99 []float64
	for _, p := range m[key2(itoa(c), tgt)] {
		p50, p99 = append(p50, p.p50), append(p99, p.p99)
	}
	return latPoint{median(p50), median(p99)}
}

// latLoopMedian is the median enqueue and loop (claim + complete)
// percentiles at c clients through tgt.
func (r *runner) latLoopMedian(c int, tgt string) (enq, loop latPoint) {
	var e50, e99, l50, l99 []float64
	for _, res := range r.latLoops[key2(itoa(c), tgt)] {
		e50, e99 = append(e50, res.EnqueueP50us), append(e99, res.EnqueueP99us)
		l50, l99 = append(l50, res.LoopP50us), append(l99, res.LoopP99us)
	}
	return latPoint{median(e50), median(e99)}, latPoint{median(l50), median(l99)}
}

// sub is what p adds over base.
func (p latPoint) sub(base latPoint) latPoint { return latPoint{p.p50 - base.p50, p.p99 - base.p99} }

// latChecks are the latency targets: at one client, what emqproxy adds to
// a GET and to the legacy enqueue is at most what twemproxy adds to a GET
// at the median, and at most 1.5 times that at the 99th percentile.
func (r *runner) latChecks() []check {
	if len(r.latGets) == 0 {
		return nil
	}
	direct, twem := r.latGetMedian(1, r.ptTargets[0].name), r.latGetMedian(1, r.ptTargets[3].name)
	tw := twem.sub(direct)
	var cs []check
	add := func(what string, got latPoint) {
		cs = append(cs,
			check{what + " p50 added ≤ twemproxy's GET", fmt.Sprintf("%.0f µs vs %.0f µs", got.p50, tw.p50), got.p50 <= tw.p50},
			check{what + " p99 added ≤ 1.5× twemproxy's GET", fmt.Sprintf("%.0f µs vs %.0f µs", got.p99, tw.p99), got.p99 <= 1.5*tw.p99})
	}
	for _, px := range []string{r.ptTargets[1].name, r.ptTargets[2].name} {
		add("1 client P1 GET, "+px, r.latGetMedian(1, px).sub(direct))
	}
	native := r.latEnqMedian(1, r.ptTargets[0].name)
	for _, px := range []string{r.ptTargets[1].name, r.ptTargets[2].name} {
		add("1 client P1 legacy enqueue, "+px, r.latEnqMedian(1, px).sub(native))
	}
	return cs
}

// writeLatency writes the latency section.
func (r *runner) writeLatency(w func(string, ...any)) {
	if len(r.latGets) == 0 {
		return
	}
	w("\n## 1b. Latency at pipeline 1 (what each hop adds to one call)\n\n")
	w("Medians over %d interleaved repetitions of each run's p50 and p99. \"Added\" is the path's figure minus the direct path's at the same client count. GET: redis-benchmark `-P 1 -t get` (its percentiles have a resolution of about 8 µs at these values). Worker: the job mix's clients at pipeline 1, each on its own queue; enqueue is one round trip, claim + complete is a worker's loop (three round trips: the pause read, the claim, the completion). The worker's direct path is EMQ.* sent to the module node with the same pause read; twemproxy cannot carry the worker's calls, so compare its GET column.\n\n", r.reps)
	gets := r.ptTargets
	w("GET, µs:\n\n| clients | direct p50 | p99 |")
	for _, t := range gets[1:] {
		w(" %s added p50 | p99 |", t.name)
	}
	w("\n|---|---|---|%s\n", strings.Repeat("---|---|", len(gets)-1))
	for _, c := range latClients {
		d := r.latGetMedian(c, gets[0].name)
		w("| %d | %.0f | %.0f |", c, d.p50, d.p99)
		for _, t := range gets[1:] {
			a := r.latGetMedian(c, t.name).sub(d)
			w(" %.0f | %.0f |", a.p50, a.p99)
		}
		w("\n")
	}
	w("\nThe legacy enqueue, µs: redis-benchmark sending `EVALSHA <enqueue> 2 emq:{latq}:job:J1 emq:{latq}:pending J1 payload` through emqproxy (rewritten to EMQ.ENQUEUE, audited) and EMQ.ENQUEUE with the same tail directly: the same client as the GET rows, so twemproxy's GET hop is the reference (twemproxy carries neither form).\n\n| clients | direct EMQ.ENQUEUE p50 | p99 |")
	for _, t := range gets[1:3] {
		w(" %s added p50 | p99 |", t.name)
	}
	w(" twemproxy's GET added p50 | p99 |\n|---|---|---|%s---|---|\n", strings.Repeat("---|---|", 2))
	for _, c := range latClients {
		d := r.latEnqMedian(c, gets[0].name)
		w("| %d | %.0f | %.0f |", c, d.p50, d.p99)
		for _, t := range gets[1:3] {
			a := r.latEnqMedian(c, t.name).sub(d)
			w(" %.0f | %.0f |", a.p50, a.p99)
		}
		tw := r.latGetMedian(c, gets[3].name).sub(r.latGetMedian(c, gets[0].name))
		w(" %.0f | %.0f |\n", tw.p50, tw.p99)
	}
	loops := r.latLoopTargets
	w("\nWorker, µs (direct: %s):\n\n| clients | direct enqueue p50 | p99 | loop p50 | p99 |", loops[0].name)
	for _, t := range loops[1:] {
		w(" %s enqueue added p50 | p99 | loop added p50 | p99 |", t.name)
	}
	w("\n|---|---|---|---|---|%s\n", strings.Repeat("---|---|---|---|", len(loops)-1))
	for _, c := range latClients {
		de, dl := r.latLoopMedian(c, loops[0].name)
		w("| %d | %.0f | %.0f | %.0f | %.0f |", c, de.p50, de.p99, dl.p50, dl.p99)
		for _, t := range loops[1:] {
			e, l := r.latLoopMedian(c, t.name)
			e, l = e.sub(de), l.sub(dl)
			w(" %.0f | %.0f | %.0f | %.0f |", e.p50, e.p99, l.p50, l.p99)
		}
		w("\n")
	}
}
