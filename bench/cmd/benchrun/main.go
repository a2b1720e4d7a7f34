// Command benchrun runs the side-by-side benchmarks of emqproxy in one go
// and writes the results (see bench/README.md). `make bench` runs it through
// bench/run.sh, which installs the tools and builds the binaries first.
//
// Everything it starts listens on loopback addresses and stops with it;
// every load is bounded by a request count or a duration.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/bench/jobmix"
	"github.com/emqproxy/emqproxy/stand/node"
)

// runner holds one benchmark run's processes and results.
type runner struct {
	root, tmp, out                      string
	proxyBin, proxydBin, jobmixBin      string
	redisBenchmarkBin, nutcracker, perf string
	reps                                int
	ackKeys                             string // section 7's extra upstream keys (--ack-keys)
	mixWarmup, mixDur, latDur           time.Duration
	module, scripts                     *node.Node
	procs                               []*proc
	admin                               map[string]string
	cmds                                []string
	configs                             []namedText
	notes                               []string
	tagSeq                              int
	started                             time.Time
	loadBefore                          string
	latGets                             map[string][]latPoint  // by clients and target (latency.go)
	latEnq                              map[string][]latPoint  // by clients and target
	latLoops                            map[string][]mixResult // by clients and target
	latLoopTargets                      []mixTarget            // the direct path first
	replay                              replayResult
	idle                                idleResult
	profiles                            []namedText // name, file
	variants                            []ptVariant
	ptTargets                           []target
	pipelines                           []int
	mixTargets                          []mixTarget
	ack                                 ackResult // section 7 (ack.go)
	floodWarmup, floodDur               time.Duration
	flood                               floodResult // section 8 (floods.go)
	goforwardBin                        string
	epollforwardBin                     string
	fl                                  floorResult // section 1d (floor.go)
	// results are the shared layout's results of sections 1, 1c and 2
	// (every other section runs in that layout only); layouts are the
	// layouts of those sections, the deployment one first when the
	// machine has one, the shared one last; cur is the layout the run's
	// processes are in now (nil: none applied, nothing pinned); cpus are
	// the CPUs the run may use; taskset pins the load generators.
	results
	layouts []*layout
	cur     *layout
	cpus    []int
	taskset string
}

type namedText struct{ name, text string }

func (r *runner) record(cmd string) {
	if !slices.Contains(r.cmds, cmd) {
		r.cmds = append(r.cmds, cmd)
	}
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Since(r.started).Truncate(time.Second)}, args...)...)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

func run() error {
	r := &runner{started: time.Now(), admin: map[string]string{}, results: newResults(),
		latGets: map[string][]latPoint{}, latEnq: map[string][]latPoint{}, latLoops: map[string][]mixResult{}}
	flag.StringVar(&r.root, "root", ".", "repository root")
	flag.StringVar(&r.out, "out", "bench/results", "results folder")
	flag.StringVar(&r.proxyBin, "emqproxy", "bin/emqproxy", "the emqproxy binary")
	flag.StringVar(&r.proxydBin, "proxyd", "bin/proxyd", "the bench/cmd/proxyd binary")
	flag.StringVar(&r.jobmixBin, "jobmix", "bin/jobmix", "the bench/cmd/jobmix binary")
	flag.StringVar(&r.goforwardBin, "goforward", "bin/goforward", "the bench/cmd/goforward binary (sections 1c and 1d)")
	flag.StringVar(&r.epollforwardBin, "epollforward", "bin/epollforward", "the bench/cmd/epollforward binary (section 1d)")
	flag.IntVar(&r.reps, "reps", 3, "interleaved repetitions (the median is reported)")
	flag.DurationVar(&r.mixWarmup, "mix-warmup", time.Second, "job mix warmup per run")
	flag.DurationVar(&r.mixDur, "mix-duration", 4*time.Second, "job mix measured window per run")
	flag.DurationVar(&r.latDur, "latency-duration", 3*time.Second, "single-client latency window")
	nP1 := flag.Int("n-p1", 100_000, "redis-benchmark requests per test at pipeline 1")
	nP16 := flag.Int("n-p16", 1_000_000, "redis-benchmark requests per test at pipeline 16")
	nP16k := flag.Int("n-p16-1k", 400_000, "redis-benchmark requests per test at pipeline 16 with 1 KiB values")
	idleConns := flag.Int("idle-clients", 1000, "idle client connections for the memory measurement")
	flag.DurationVar(&r.floodWarmup, "flood-warmup", time.Second, "floods: warmup of the well-behaved clients per window")
	flag.DurationVar(&r.floodDur, "flood-duration", 4*time.Second, "floods: each window (with a flood, or none)")
	flag.StringVar(&r.ackKeys, "ack-keys", "", `more keys of the ack_replicas 1 proxy's upstream (section 7), e.g. "conns: 4"`)
	only := flag.String("only", "", `run one section alone: "oneclient" (section 1c), "floor" (section 1d), "rewrite" (section 1e), "capture" (section 6), "ack" (section 7, ack_replicas) or "floods" (section 8), written to <stem>-<section>.md`)
	flag.Parse()
	if *only != "" && !slices.Contains([]string{"oneclient", "floor", "rewrite", "capture", "ack", "floods"}, *only) {
		return fmt.Errorf("--only %q: the sections that run alone are \"oneclient\", \"floor\", \"rewrite\", \"capture\", \"ack\" and \"floods\"", *only)
	}
	if r.floodDur <= 0 || r.floodWarmup < 0 || r.floodWarmup+r.floodDur > time.Minute {
		return fmt.Errorf("flood warmup %v + duration %v: at most 1m, duration > 0", r.floodWarmup, r.floodDur)
	}
	if r.reps < 1 || r.reps > 9 {
		return fmt.Errorf("reps %d: 1..9", r.reps)
	}
	var err error
	if r.root, err = filepath.Abs(r.root); err != nil {
		return err
	}
	for _, p := range []*string{&r.out, &r.proxyBin, &r.proxydBin, &r.jobmixBin, &r.goforwardBin, &r.epollforwardBin} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(r.root, *p)
		}
	}
	for _, t := range []struct {
		dst  *string
		name string
	}{{&r.redisBenchmarkBin, "redis-benchmark"}, {&r.nutcracker, "nutcracker"}} {
		if *t.dst, err = exec.LookPath(t.name); err != nil {
			return fmt.Errorf("%s not found (bench/run.sh installs it): %w", t.name, err)
		}
	}
	if p, err := exec.LookPath("perf"); err == nil && exec.Command(p, "stat", "-e", "raw_syscalls:sys_enter", "true").Run() == nil {
		r.perf = p
	} else {
		r.notes = append(r.notes, "perf is missing or not allowed here: no system call counts.")
	}
	if r.cpus, err = allowedCPUs(); err != nil {
		return fmt.Errorf("this process's CPU affinity: %w", err)
	}
	if p, err := exec.LookPath("taskset"); err == nil {
		r.taskset = p
	}
	var skipped string
	if r.layouts, skipped = layoutsFor(r.cpus, r.taskset, &r.results); skipped != "" {
		r.notes = append(r.notes, skipped)
	}
	if r.tmp, err = os.MkdirTemp("", "emqbench-"); err != nil {
		return err
	}
	defer os.RemoveAll(r.tmp)
	r.loadBefore = loadAvg()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer func() {
		for _, p := range r.procs {
			p.stop()
		}
	}()

	if *only != "" {
		kind := kindBinary
		if !r.binaryServes() {
			kind = kindProxyd
		}
		if *only == "oneclient" {
			if err := r.oneClientOnly(ctx, kind); err != nil {
				return err
			}
			return r.writeOnly(resultStem(r.root, r.started), "oneclient", "section 1c alone (`--only oneclient`)",
				func(w func(string, ...any)) { r.writeOneClient(w, "twemproxy") })
		}
		if *only == "floor" {
			if err := r.floorOnly(ctx, kind); err != nil {
				return err
			}
			return r.writeOnly(resultStem(r.root, r.started), "floor", "section 1d alone (`--only floor`)",
				func(w func(string, ...any)) { r.writeFloor(w, "twemproxy") })
		}
		if *only == "rewrite" {
			if err := r.rewriteOnly(ctx, kind); err != nil {
				return err
			}
			return r.writeOnly(resultStem(r.root, r.started), "rewrite", "section 1e alone (`--only rewrite`)",
				func(w func(string, ...any)) {
					r.writeRewriteCost(w)
					writeChecks(w, "\n## Targets (issue 49)", "measured", r.rewriteChecks())
				})
		}
		if *only == "capture" {
			if err := r.captureOnly(ctx, kind); err != nil {
				return err
			}
			return r.writeCaptureOnly(resultStem(r.root, r.started))
		}
		if *only == "floods" {
			if err := r.floods(ctx, kind); err != nil {
				return err
			}
			return r.writeFloodsOnly(resultStem(r.root, r.started))
		}
		if err := r.ackReplicas(ctx, kind); err != nil {
			return err
		}
		return r.writeAckOnly(resultStem(r.root, r.started))
	}

	if r.module, err = node.Start(node.Options{Role: node.Module}); err != nil {
		return err
	}
	defer r.module.Stop()
	if r.scripts, err = node.Start(node.Options{Role: node.Scripts}); err != nil {
		return err
	}
	defer r.scripts.Stop()
	r.logf("module node %s (pid %d), scripts node %s (pid %d)", r.module.Addr, r.module.PID(), r.scripts.Addr, r.scripts.PID())

	kind := kindBinary
	if !r.binaryServes() {
		kind = kindProxyd
		r.notes = append(r.notes, "`emqproxy serve` was not usable: the emqproxy rows ran bench/cmd/proxyd (proxy.New over the same data path).")
	}
	auditFile := func(name string) string { return filepath.Join(r.tmp, safeName(name)+"-audit.log") }
	// emqproxy runs with its defaults (runtime.gomaxprocs 1); the second
	// instance with Go's own choice, a P per core, for comparison.
	const nProxy, nProxy1, nTwem = "emqproxy", "emqproxy GOMAXPROCS=cores", "twemproxy"
	// It listens on a Unix socket too, for section 1c (as twemproxy's
	// second pool does).
	pxSpec := proxySpec{name: nProxy, kind: kind, audit: auditFile(nProxy), pprof: true}
	if kind == kindBinary {
		pxSpec.unix = filepath.Join(r.tmp, "emqproxy.sock")
	}
	px, err := r.startProxy(pxSpec)
	if err != nil {
		return err
	}
	px1, err := r.startProxy(proxySpec{name: nProxy1, kind: kind, gomaxprocs: runtime.NumCPU(), audit: auditFile(nProxy1), pprof: true})
	if err != nil {
		return err
	}
	tw, err := r.startTwemproxy()
	if err != nil {
		return err
	}

	// 1. Passthrough.
	r.variants = []ptVariant{
		{name: "P1", pipeline: 1, size: 3, n: *nP1},
		{name: "P16", pipeline: 16, size: 3, n: *nP16},
		{name: "P16 1KiB", pipeline: 16, size: 1024, n: *nP16k},
	}
	r.ptTargets = []target{
		{name: "direct", addr: r.module.Addr},
		{name: nProxy, addr: px.addr, pid: px.pid(), admin: r.admin[nProxy]},
		{name: nProxy1, addr: px1.addr, pid: px1.pid(), admin: r.admin[nProxy1]},
		{name: nTwem, addr: tw.addr, pid: tw.pid(), unix: "unix:" + r.twemUnixSocket()},
	}
	if pxSpec.unix != "" {
		r.ptTargets[1].unix = "unix:" + pxSpec.unix
	}
	if err := r.passthrough(ctx, r.variants, r.ptTargets); err != nil {
		return err
	}
	// 1b. Latency at pipeline 1.
	r.latLoopTargets = []mixTarget{
		{name: "EMQ.* directly (with the pause read)", mode: jobmix.Native, addr: r.module.Addr, server: r.module, pauseRead: true},
		{name: nProxy, mode: jobmix.Legacy, addr: px.addr, pid: px.pid(), server: r.module},
		{name: nProxy1, mode: jobmix.Legacy, addr: px1.addr, pid: px1.pid(), server: r.module},
	}
	if err := r.latencyCurve(ctx, r.ptTargets, r.latLoopTargets); err != nil {
		return err
	}
	// 1c. One client, paired rounds, with the design's floor beside.
	if err := r.oneClientPaths(ctx, r.ptTargets[0], r.ptTargets[1], r.ptTargets[3]); err != nil {
		return err
	}
	// 1d. The floor of a Go data path at pipeline 1, 50 clients.
	if err := r.floorPaths(ctx, r.ptTargets[0], r.ptTargets[1], r.ptTargets[3]); err != nil {
		return err
	}
	// 1e. What a rewrite costs the proxy.
	if err := r.rewriteCost(ctx, r.ptTargets[1]); err != nil {
		return err
	}
	tw.stop()

	// 6. A proxy that captures every queue (its cost against the same
	// binary without; its capture is replayed below).
	capDir := filepath.Join(r.tmp, "capture")
	pxCap, err := r.startProxy(proxySpec{name: mixCapture, kind: kind, audit: auditFile(mixCapture), capture: capDir})
	if err != nil {
		return err
	}

	// 2 and 4. The job mix, and the audit log on and off.
	pdOn, err := r.startProxy(proxySpec{name: "proxyd audit file", kind: kindProxyd, audit: auditFile("proxyd")})
	if err != nil {
		return err
	}
	pdOff, err := r.startProxy(proxySpec{name: "proxyd audit off", kind: kindProxyd, audit: "off"})
	if err != nil {
		return err
	}
	r.pipelines = []int{1, 16}
	r.mixTargets = []mixTarget{
		{name: mixLua, mode: jobmix.Legacy, addr: r.scripts.Addr, server: r.scripts},
		{name: mixProxy, mode: jobmix.Legacy, addr: px.addr, pid: px.pid(), server: r.module, admin: r.admin[nProxy]},
		{name: mixProxy1, mode: jobmix.Legacy, addr: px1.addr, pid: px1.pid(), server: r.module, admin: r.admin[nProxy1]},
		{name: mixNative, mode: jobmix.Native, addr: r.module.Addr, server: r.module},
		{name: mixAuditOn, mode: jobmix.Legacy, addr: pdOn.addr, pid: pdOn.pid(), server: r.module},
		{name: mixAuditOff, mode: jobmix.Legacy, addr: pdOff.addr, pid: pdOff.pid(), server: r.module},
	}
	if kind == kindBinary {
		r.mixTargets = append(r.mixTargets, mixTarget{name: mixCapture, mode: jobmix.Legacy, addr: pxCap.addr, pid: pxCap.pid(), server: r.module})
	}
	if err := r.mix(ctx, r.pipelines, r.mixTargets); err != nil {
		return err
	}
	pdOn.stop()
	pdOff.stop()
	// 7. ack_replicas, on a primary with a replica of its own.
	if err := r.ackReplicas(ctx, kind); err != nil {
		return err
	}
	// 8. Floods, on a module node of their own.
	if err := r.floods(ctx, kind); err != nil {
		return err
	}
	pxCap.stop() // writes what it has queued
	r.replay = r.replayCapture(ctx, capDir)

	// 5. CPU profiles of the proxy under the job mix.
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return err
	}
	stem := resultStem(r.root, r.started)
	for _, p := range []int{1, 16} {
		file := fmt.Sprintf("%s-cpu-mix-p%d.pprof", stem, p)
		t := r.mixTargets[1]
		if err := r.profile(ctx, t, p, r.admin[nProxy], filepath.Join(r.out, file)); err != nil {
			r.notes = append(r.notes, fmt.Sprintf("CPU profile at P%d failed: %v", p, err))
			continue
		}
		r.profiles = append(r.profiles, namedText{fmt.Sprintf("%s, job mix P%d, 50 clients", nProxy, p), file})
	}
	px.stop()
	px1.stop()

	// 3. Idle memory, on a fresh proxy.
	pi, err := r.startProxy(proxySpec{name: "emqproxy (idle memory)", kind: kind, audit: auditFile("idle")})
	if err != nil {
		return err
	}
	if r.idle, err = r.idleMemory(pi, *idleConns); err != nil {
		return err
	}
	r.logf("idle: RSS %d -> %d bytes with %d clients: %.0f bytes per client", r.idle.before, r.idle.after, r.idle.conns, r.idle.perConn())
	pi.stop()

	return r.writeReport(stem)
}

// Job mix target names.
const (
	mixLua      = "Lua: legacy client on a scripts node"
	mixProxy    = "emqproxy -> module node"
	mixProxy1   = "emqproxy GOMAXPROCS=cores -> module"
	mixNative   = "EMQ.* directly on the module node"
	mixAuditOn  = "proxyd, audit to a file"
	mixAuditOff = "proxyd, audit off"
	mixCapture  = "emqproxy capturing every queue"
)
