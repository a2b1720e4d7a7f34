package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/emqproxy/emqproxy/bench/jobmix"
	"github.com/emqproxy/emqproxy/stand/node"
)

// mixTarget is one place the job mix is driven.
type mixTarget struct {
	name   string
	mode   jobmix.Mode
	addr   string
	pid    int        // the proxy's pid, 0 when direct
	server *node.Node // the node behind it
	admin  string     // the proxy's admin listener, for its allocation count ("" = none)
	// pauseRead: a native target reads the pause flag before each claim,
	// as the legacy client does (the latency section's baseline).
	pauseRead bool
	// keepGoing: the clients count errors and go on (jobmix --keep-going),
	// and the node is not reset after the run (the floods reset it
	// before each run, and read the proxy's counters after it).
	keepGoing bool
}

// mixResult is one jobmix run with the CPU around it.
type mixResult struct {
	jobmix.Result
	cpu, srvCPU cpu
	load        cpu // of the jobmix process itself
	srv         serverStats
	allocs      float64       // the proxy's heap allocations over the run; -1 = not known
	wall        time.Duration // the jobmix process's whole run (warmup included)
}

// jobmixOnce runs the jobmix command once and resets the node afterwards.
func (r *runner) jobmixOnce(ctx context.Context, t mixTarget, clients, pipeline int, warmup, dur time.Duration) (mixResult, error) {
	r.tagSeq++
	argv := []string{r.jobmixBin, "--mode", string(t.mode), "--addr", t.addr,
		"--clients", strconv.Itoa(clients), "--pipeline", strconv.Itoa(pipeline),
		"--warmup", warmup.String(), "--duration", dur.String(), "--tag", "r" + strconv.Itoa(r.tagSeq)}
	if t.pauseRead {
		argv = append(argv, "--pause-read")
	}
	if t.keepGoing {
		argv = append(argv, "--keep-going")
	}
	srvPID := t.server.PID()
	m0, hasM0 := mallocsOf(t.admin)
	c0, s0, st0, t0 := cpuOf(t.pid), cpuOf(srvPID), statsOf(t.server.Addr), time.Now()
	out, load, err := r.run(ctx, warmup+dur+2*time.Minute, r.loadArgv(argv)...)
	c1, s1, st1, wall := cpuOf(t.pid), cpuOf(srvPID), statsOf(t.server.Addr), time.Since(t0)
	m1, hasM1 := mallocsOf(t.admin)
	if !t.keepGoing {
		if rerr := r.resetNode(t.server); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return mixResult{}, fmt.Errorf("job mix on %s: %w", t.name, err)
	}
	var res mixResult
	if err := json.Unmarshal(bytes.TrimSpace(out), &res.Result); err != nil {
		return mixResult{}, fmt.Errorf("jobmix output %q: %w", out, err)
	}
	res.srvCPU, res.srv, res.wall, res.load = s1.sub(s0), serverStats{st1.cmds - st0.cmds, st1.reads - st0.reads}, wall, load
	res.allocs = -1
	if hasM0 && hasM1 {
		res.allocs = m1 - m0
	}
	if t.pid != 0 {
		res.cpu = c1.sub(c0)
	}
	return res, nil
}

// resetNode drops every key and writes the brand back, so each run starts
// on an empty keyspace (the nodes' scripts and connections are kept). Both
// go in one MULTI: a proxy's fence probe that met the node between the two
// would find the brand absent and rightly close every connection it has to
// the node, and the next run's clients would get FENCE errors.
func (r *runner) resetNode(n *node.Node) error {
	brand := []string{"SET", node.VersionKey, node.DefaultBrand}
	if n.Opts.Role == node.Module {
		brand = []string{"EMQ.INSTALL", "1", node.VersionKey}
	}
	replies, err := node.RawDoAll(n.Addr, []string{"MULTI"}, []string{"FLUSHALL"}, brand, []string{"EXEC"})
	if err != nil {
		return fmt.Errorf("reset %s: %w", n.Addr, err)
	}
	exec := replies[len(replies)-1]
	// EXEC answers an array of the two replies; an error inside it (the
	// brand refused) or instead of it (the transaction aborted) stops the
	// run.
	if !bytes.HasPrefix(exec, []byte("*2\r\n")) || bytes.Contains(exec, []byte("\r\n-")) {
		return fmt.Errorf("reset %s: EXEC answered %q", n.Addr, bytes.TrimSpace(exec))
	}
	return nil
}

// mix runs the job mix at each pipeline against every target, reps
// times, interleaved (rep, layout, pipeline, target); then one
// single-client run per target for latency in each layout. The shared
// layout runs every target; a pinned one only those of pinnedTargets
// (the ratios; the audit log's and the capture's costs are the shared
// layout's). It leaves the run in the shared layout.
func (r *runner) mix(ctx context.Context, pipelines []int, targets []mixTarget) error {
	for rep := range r.reps {
		for _, l := range r.layouts {
			if err := r.inLayout(l); err != nil {
				return err
			}
			for _, p := range pipelines {
				for _, t := range layoutMixTargets(l, targets) {
					res, err := r.jobmixOnce(ctx, t, 50, p, r.mixWarmup, r.mixDur)
					if err != nil {
						return err
					}
					r.logf("job mix rep %d %s P%-2d %-26s %9.0f ops/s", rep+1, shortLayout(l), p, t.name, res.OpsPerSec)
					k := key2(strconv.Itoa(p), t.name)
					l.res.mixRes[k] = append(l.res.mixRes[k], res)
				}
			}
		}
	}
	for _, l := range r.layouts {
		if err := r.inLayout(l); err != nil {
			return err
		}
		for _, t := range layoutMixTargets(l, targets) {
			res, err := r.jobmixOnce(ctx, t, 1, 1, r.mixWarmup/2, r.latDur)
			if err != nil {
				return err
			}
			r.logf("latency %s 1 client P1 %-26s p50 %.0f us p99 %.0f us", shortLayout(l), t.name, res.P50us, res.P99us)
			l.res.latency[t.name] = res
		}
	}
	return r.inLayout(r.shared())
}

// pinnedTargets are the job mix's targets measured in a pinned layout too.
var pinnedTargets = []string{mixLua, mixProxy, mixProxy1, mixNative}

// layoutMixTargets are the targets of targets that l measures.
func layoutMixTargets(l *layout, targets []mixTarget) []mixTarget {
	if !l.pinned() {
		return targets
	}
	var out []mixTarget
	for _, t := range targets {
		if slices.Contains(pinnedTargets, t.name) {
			out = append(out, t)
		}
	}
	return out
}

// profile drives the job mix through a proxy with pprof and saves a
// 5-second CPU profile taken in the middle of it.
func (r *runner) profile(ctx context.Context, t mixTarget, pipeline int, admin, path string) error {
	if admin == "" {
		return fmt.Errorf("no pprof listener on %s", t.name)
	}
	type done struct {
		res mixResult
		err error
	}
	ch := make(chan done, 1)
	go func() {
		res, err := r.jobmixOnce(ctx, t, 50, pipeline, time.Second, 7*time.Second)
		ch <- done{res, err}
	}()
	select {
	case <-time.After(1500 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	url := "http://" + admin + "/debug/pprof/profile?seconds=5"
	r.record("curl " + url + " > " + path)
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(url)
	if err == nil {
		defer resp.Body.Close()
		var f *os.File
		if f, err = os.Create(path); err == nil {
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
	}
	d := <-ch
	if err != nil {
		return err
	}
	if d.err != nil {
		return d.err
	}
	r.logf("profile P%d through %s: %.0f ops/s while profiled", pipeline, t.name, d.res.OpsPerSec)
	return nil
}
