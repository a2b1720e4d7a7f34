package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/emqproxy/emqproxy/stand/node"
)

// Layouts. A sidecar's host gives the server a core of its own, and the
// application and the proxy share what is left; the bench's nodes, load
// generators and proxies share the whole machine instead, and on a 2-core
// machine each of them takes CPU from the others. Sections 1, 1c and 2
// are therefore measured twice in one run, interleaved by repetition: in
// the deployment layout (every node on one CPU alone; the load generators
// and the proxies on another) and in the shared layout (nothing pinned,
// what a developer on one box sees). Every other section runs in the
// shared layout.
//
// The nodes and the proxies are started once and moved between the
// layouts with sched_setaffinity on each of their threads (what `taskset
// -a -p` does); the load generators, started for each measurement, start
// under `taskset -c`, so they are pinned before their first instruction.

// Layout names, as the report titles them.
const (
	layoutDeploy = "deployment (node on its own core)"
	layoutShared = "shared (everything on two cores)"
)

// layout is where the processes of a measurement run, and what was
// measured there.
type layout struct {
	name string
	// node, proxy and load are the CPUs of the nodes (redis-server), the
	// proxies (emqproxy, twemproxy, goforward, ...) and the load
	// generators (redis-benchmark, jobmix); nil leaves a process on every
	// CPU the run may use.
	node, proxy, load []int
	res               *results
}

// pinned reports whether the layout pins anything.
func (l *layout) pinned() bool { return l.node != nil || l.proxy != nil || l.load != nil }

// how says which process runs on which CPU, for the report.
func (l *layout) how(all []int) string {
	if !l.pinned() {
		return fmt.Sprintf("nothing pinned: the nodes (redis-server), the proxies (emqproxy, twemproxy, goforward, proxyd) and the load generators (redis-benchmark, jobmix) all run on CPUs %s, wherever the kernel puts them", cpuList(all))
	}
	return fmt.Sprintf("the nodes (redis-server) on CPU %s alone; the load generators (redis-benchmark, jobmix) and the proxies (emqproxy, twemproxy, goforward) on CPU %s",
		cpuList(l.node), cpuList(l.proxy))
}

// results are what one layout measured in sections 1, 1c, 1e and 2.
type results struct {
	pt         map[string][]ptResult  // section 1, by variant and target
	ptEvidence map[string]evidence    // section 1's perf pass
	mixRes     map[string][]mixResult // section 2, by pipeline and target
	latency    map[string]mixResult   // section 2's single-client runs, by target
	one        oneClientResult        // section 1c
	rw         rewriteResult          // section 1e
}

func newResults() results {
	return results{pt: map[string][]ptResult{}, ptEvidence: map[string]evidence{},
		mixRes: map[string][]mixResult{}, latency: map[string]mixResult{}}
}

// layoutsFor returns the layouts of a run allowed on cpus (the run's own
// affinity), the deployment layout first: the nodes on the second CPU,
// the rest on the first. With fewer than two CPUs, or without taskset, it
// returns the shared layout alone and why the other is left out. shared
// is the shared layout's results.
func layoutsFor(cpus []int, taskset string, shared *results) ([]*layout, string) {
	sh := &layout{name: layoutShared, res: shared}
	if len(cpus) < 2 {
		return []*layout{sh}, fmt.Sprintf("the deployment layout (a node on a core of its own) was skipped: this run may use %d CPU (%s), and it needs two.", len(cpus), cpuList(cpus))
	}
	if taskset == "" {
		return []*layout{sh}, "the deployment layout (a node on a core of its own) was skipped: taskset (util-linux) was not found to pin the load generators."
	}
	dr := newResults()
	dep := &layout{name: layoutDeploy, node: cpus[1:2], proxy: cpus[0:1], load: cpus[0:1], res: &dr}
	return []*layout{dep, sh}, ""
}

// pinArgv returns argv started under taskset on cpus; argv itself when
// cpus is nil (nothing pinned).
func pinArgv(taskset string, cpus []int, argv []string) []string {
	if cpus == nil {
		return argv
	}
	return append([]string{taskset, "-c", cpuList(cpus)}, argv...)
}

// cpuList is cpus as taskset and /proc/<pid>/status write them: "0", "0,1".
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// allowedCPUs is the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pinProcess sets the affinity of every thread of process pid to cpus. A
// thread inherits its creator's affinity, so a thread started while the
// threads are being pinned is caught by the next pass over
// /proc/<pid>/task, and none started after that escapes. A process that
// has exited is not an error.
func pinProcess(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	done := map[int]bool{}
	for range 10 {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		more := false
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			more, done[tid] = true, true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pin thread %d of %d to CPUs %s: %w", tid, pid, cpuList(cpus), err)
			}
		}
		if !more {
			return nil
		}
	}
	return nil
}

// inLayout moves the run's long-lived processes into layout l: the nodes
// of sections 1, 1c and 2 onto l.node and every process the run started
// and has not stopped (proxies, twemproxy, the forwarders) onto l.proxy.
// The load generators started after it are pinned by loadArgv. A nil
// layout, or one the run is in already, changes nothing.
func (r *runner) inLayout(l *layout) error {
	if l == nil || r.cur == l {
		return nil
	}
	or := func(cpus []int) []int {
		if cpus == nil {
			return r.cpus
		}
		return cpus
	}
	for _, n := range []struct {
		name string
		node *node.Node
	}{{"module node", r.module}, {"scripts node", r.scripts}} {
		if n.node == nil || !n.node.Running() {
			continue
		}
		if err := pinProcess(n.node.PID(), or(l.node)); err != nil {
			return fmt.Errorf("%s, layout %s: %w", n.name, l.name, err)
		}
	}
	for _, p := range r.procs {
		if p.cmd.Process == nil || p.cmd.ProcessState != nil {
			continue
		}
		if err := pinProcess(p.pid(), or(l.proxy)); err != nil {
			return fmt.Errorf("%s, layout %s: %w", p.name, l.name, err)
		}
	}
	r.cur = l
	return nil
}

// shared returns the shared layout (always the last; a runner that was
// given no layouts has the shared layout's results alone).
func (r *runner) shared() *layout {
	if len(r.layouts) == 0 {
		return &layout{name: layoutShared, res: &r.results}
	}
	return r.layouts[len(r.layouts)-1]
}

// layoutsThat are the run's layouts whose results measured says have a
// section's figures.
func (r *runner) layoutsThat(measured func(*results) bool) []*layout {
	var out []*layout
	for _, l := range r.layouts {
		if measured(l.res) {
			out = append(out, l)
		}
	}
	return out
}

// loadArgv is a load generator's argv in the current layout.
func (r *runner) loadArgv(argv []string) []string {
	if r.cur == nil {
		return argv
	}
	return pinArgv(r.taskset, r.cur.load, argv)
}

// proxyArgv is the argv of a process on the proxies' side, started in the
// current layout.
func (r *runner) proxyArgv(argv []string) []string {
	if r.cur == nil {
		return argv
	}
	return pinArgv(r.taskset, r.cur.proxy, argv)
}

// shortLayout is l's name in the progress log.
func shortLayout(l *layout) string {
	if l.pinned() {
		return "deploy"
	}
	return "shared"
}

// writeLayouts writes the report's header paragraph on the layouts: which
// process ran on which CPU in each, and which sections ran in which.
func (r *runner) writeLayouts(w func(string, ...any)) {
	if len(r.layouts) == 0 {
		return
	}
	w("Layouts: sections 1, 1c and 2 are measured in each layout below, in this run, the layouts interleaved by repetition, with the same repetitions in each (--reps %d; none reduced); every other section runs in the shared layout only. The nodes and the proxies are started once and moved between the layouts with sched_setaffinity on each of their threads (as `taskset -a -p` does); the load generators start under `taskset -c` in a pinned layout. `Gn` keeps GOMAXPROCS at the machine's %d cores in both layouts, on its one CPU in a pinned one.\n\n", r.reps, runtime.NumCPU())
	for _, l := range r.layouts {
		w("- **%s**: %s.\n", l.name, l.how(r.cpus))
	}
	w("\n")
}

// writeLayoutRatios writes the headline ratios of sections 1, 1c and 2
// side by side, a column per layout, the deployment layout first.
func (r *runner) writeLayoutRatios(w func(string, ...any)) {
	if len(r.layouts) == 0 || len(r.ptTargets) != 4 {
		return
	}
	w("## Ratios by layout\n\nThe same figures as the tables of sections 1, 1c and 2 below, each layout's column from its own runs (how each was taken is in the header above).\n\n| figure |")
	for _, l := range r.layouts {
		w(" %s |", l.name)
	}
	w("\n|---|%s\n", strings.Repeat("---|", len(r.layouts)))
	row := func(what string, f func(s *results) string) {
		w("| %s |", what)
		for _, l := range r.layouts {
			w(" %s |", f(l.res))
		}
		w("\n")
	}
	d, px, tw := r.ptTargets[0].name, r.ptTargets[1].name, r.ptTargets[3].name
	for _, v := range r.variants {
		for _, test := range []string{"SET", "GET"} {
			row(fmt.Sprintf("passthrough %s %s, emqproxy/direct", v.name, test), func(s *results) string {
				return ratio(s.ptMedian(v.name, px, test), s.ptMedian(v.name, d, test))
			})
			row(fmt.Sprintf("passthrough %s %s, emqproxy/twemproxy", v.name, test), func(s *results) string {
				return ratio(s.ptMedian(v.name, px, test), s.ptMedian(v.name, tw, test))
			})
		}
	}
	for _, p := range r.pipelines {
		for _, t := range []string{mixProxy, mixProxy1} {
			row(fmt.Sprintf("job mix P%d, %s / Lua", p, t), func(s *results) string {
				return ratio(s.mixMedian(p, t), s.mixMedian(p, mixLua))
			})
		}
	}
	var paths []string
	for _, l := range r.layouts {
		if len(l.res.one.paths) > 0 {
			paths = l.res.one.paths
		}
	}
	for _, p := range paths[min(1, len(paths)):] {
		row(fmt.Sprintf("one client P1 GET, %s added p50 µs", p), func(s *results) string {
			if len(s.one.paths) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", median(s.one.added(p, s.one.paths[0])))
		})
	}
}

// checks49 are issue 49's targets that the layouts measure, read in the
// deployment layout (the shared one when the run has no other): the
// legacy job mix through the proxy against Lua directly (beside it, the
// same client without the proxy: EMQ.* on the module node), and one
// client's added latency over a Unix socket against emqproxy's TCP hop
// and twemproxy's Unix socket.
func (r *runner) checks49() []check {
	if len(r.layouts) == 0 {
		return nil
	}
	l := r.layouts[0]
	var cs []check
	for _, c := range []struct {
		p    int
		want float64
	}{{1, 1.2}, {16, 1.5}} {
		a, b := l.res.mixMedian(c.p, mixProxy), l.res.mixMedian(c.p, mixLua)
		if a == 0 || b == 0 {
			continue
		}
		got := ratio(a, b)
		if n := l.res.mixMedian(c.p, mixNative); n > 0 {
			// What the module gives the same client without a proxy
			// (EMQ.* sent to the node itself). Not a ceiling: the proxy
			// carries many clients' calls in each read of the node, which
			// lowers the node's cost per call.
			got += fmt.Sprintf(" (no proxy at all, EMQ.* directly: %s)", ratio(n, b))
		}
		cs = append(cs, check{fmt.Sprintf("%s: job mix P%d through the proxy ≥ %.1f× Lua directly", l.name, c.p, c.want), got, a/b >= c.want})
	}
	cs = append(cs, r.rewriteChecks()...)
	o := l.res.one
	if len(o.paths) == 0 || len(r.ptTargets) != 4 {
		return cs
	}
	px, tw := r.ptTargets[1].name, r.ptTargets[3].name
	pxu, twu := px+" (unix)", tw+" (unix)"
	if len(o.p50[pxu]) == 0 || len(o.p50[px]) == 0 {
		return cs
	}
	direct := o.paths[0]
	au, at := median(o.added(pxu, direct)), median(o.added(px, direct))
	cs = append(cs, check{fmt.Sprintf("%s: 1 client P1 GET over a Unix socket, emqproxy's added p50 ≤ half its TCP hop's", l.name),
		fmt.Sprintf("%.0f µs vs %.0f µs", au, at), au <= at/2})
	if len(o.p50[twu]) > 0 {
		d := median(o.added(pxu, twu))
		cs = append(cs, check{fmt.Sprintf("%s: 1 client P1 GET over a Unix socket, emqproxy's added p50 ≤ twemproxy's (paired rounds)", l.name),
			fmt.Sprintf("%.0f µs vs %.0f µs; the rounds' difference %.0f µs", au, median(o.added(twu, direct)), d), d <= 0})
	}
	return cs
}
