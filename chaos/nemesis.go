package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// Kinds of faults.
const (
	FaultSidecarKill = "sidecar-kill"    // SIGKILL a sidecar, start it again
	FaultSidecarStop = "sidecar-stop"    // SIGSTOP a sidecar past its clients' deadline, SIGCONT
	FaultSidecarHUP  = "sidecar-reload"  // SIGHUP: the sidecar reloads its configuration and routes
	FaultPrimaryKill = "primary-kill"    // SIGKILL a primary (a failover), back as a replica
	FaultPrimaryStop = "primary-stop"    // SIGSTOP a primary past down-after (a stale primary), SIGCONT
	FaultMove        = "queue-move"      // move a queue to another upstream
	FaultMoveKilled  = "queue-move-kill" // the same, the mover killed mid-way and resumed
	FaultNetSlow     = "net-slow"        // latency on a relay
	FaultNetStall    = "net-stall"       // nothing passes a relay, then its connections close
	FaultNetCut      = "net-cut"         // the relay refuses and closes every connection
	FaultNetReset    = "net-reset"       // the relay resets its connections (workers cut mid-call)
	FaultNodeReset   = "node-link-reset" // a node closes every client connection (the sidecars' links cut mid-call)
	FaultNodeStall   = "node-link-stall" // a node answers no client for a while (CLIENT PAUSE ALL)
	// FaultMoveStopped starts a move, stops the mover (SIGSTOP) once it
	// printed that it held the queue, aborts the move with `--abort`, then
	// continues the mover (SIGCONT): it must not flip (PropAborted).
	FaultMoveStopped = "queue-move-stop-abort"
	// FaultBlocked is a client blocked in BLPOP with timeout 0 through a
	// sidecar while the move lane moves queues: on a key of a campaign
	// queue (what a move of it must give up) or on a key of no campaign
	// queue (what must stop no control loop).
	FaultBlocked = "client-blocked"
)

// PhaseFlippedAfterAbort is the phase of a fault event that says a move
// flipped after `--abort` answered that it was aborted (PropAborted).
const PhaseFlippedAfterAbort = "flipped-after-abort"

// lanes run their faults one after the other; the lanes run at once, so
// faults of different lanes overlap.
var lanes = [][]string{
	{FaultSidecarKill, FaultSidecarStop, FaultSidecarHUP},
	{FaultPrimaryKill, FaultPrimaryStop},
	{FaultNetSlow, FaultNetStall, FaultNetCut, FaultNetReset},
	{FaultMove, FaultMoveKilled, FaultMoveStopped},
	{FaultNodeReset, FaultNodeStall},
	{FaultBlocked},
}

// AllFaults lists every kind.
var AllFaults = slices.Concat(lanes...)

// Fault is one scheduled fault.
type Fault struct {
	At     time.Duration // from the start of the campaign
	Lane   int
	Kind   string
	Target int           // sidecar, master set, relay or queue index
	Other  int           // a second choice (the move's target, the relay's side)
	For    time.Duration // how long the fault lasts
	Step   string        // the step a killed mover stops after
}

func (f Fault) String() string {
	return fmt.Sprintf("+%6.2fs lane %d %-15s target %d other %d for %v %s", f.At.Seconds(), f.Lane, f.Kind, f.Target, f.Other, f.For, f.Step)
}

// Schedule draws the faults of a campaign from its seed: the same seed,
// duration and kinds give the same schedule. Each lane's faults follow
// one another with a gap of gap to 2*gap.
func Schedule(seed uint64, d time.Duration, kinds []string, gap time.Duration) []Fault {
	var out []Fault
	for li, lane := range lanes {
		var ks []string
		for _, k := range lane {
			if slices.Contains(kinds, k) {
				ks = append(ks, k)
			}
		}
		if len(ks) == 0 {
			continue
		}
		rng := rand.New(rand.NewPCG(seed, uint64(li)))
		at := time.Duration(rng.Int64N(int64(gap)))
		for at < d {
			f := Fault{At: at, Lane: li, Kind: ks[rng.IntN(len(ks))], Target: rng.IntN(16), Other: rng.IntN(16)}
			f.For = 300*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second)))
			if f.Kind == FaultMoveKilled {
				f.Step = []string{"copied", "held"}[rng.IntN(2)]
			}
			out = append(out, f)
			at += gap + time.Duration(rng.Int64N(int64(gap)))
		}
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return int(a.At - b.At) })
	return out
}

// nemesis injects faults into a fleet and writes them to the history.
type nemesis struct {
	f      *Fleet
	h      *History
	queues []string
	mu     sync.Mutex
	owner  map[string]string // queue -> upstream, as the moves left it
	lines  []string
	moves  atomic.Int64 // moves started (for the blocked client's report)
}

func (n *nemesis) event(f Fault, phase, detail string) {
	n.h.Add(Event{Kind: KindFault, Proc: "nemesis", Fault: f.Kind, Phase: phase, Detail: detail})
	n.mu.Lock()
	n.lines = append(n.lines, fmt.Sprintf("%s %-15s %-5s %s", time.Now().Format("15:04:05.000"), f.Kind, phase, detail))
	n.mu.Unlock()
}

// runLane injects the lane's faults at their times until the end; a
// fault that is due runs to its end (its healing) before the next.
func (n *nemesis) runLane(start time.Time, faults []Fault, end time.Time) {
	for _, f := range faults {
		at := start.Add(f.At)
		// A lane whose faults last longer than its gaps runs late: it
		// stops at the end all the same, with the faults not yet begun.
		if at.After(end) || time.Now().After(end) {
			return
		}
		time.Sleep(time.Until(at))
		n.inject(f)
	}
}

func (n *nemesis) inject(f Fault) {
	var detail string
	var err error
	switch f.Kind {
	case FaultSidecarKill, FaultSidecarStop, FaultSidecarHUP:
		detail, err = n.sidecar(f)
	case FaultPrimaryKill, FaultPrimaryStop:
		detail, err = n.primary(f)
	case FaultNetSlow, FaultNetStall, FaultNetCut, FaultNetReset:
		detail, err = n.network(f)
	case FaultMove, FaultMoveKilled, FaultMoveStopped:
		detail, err = n.move(f)
	case FaultBlocked:
		detail, err = n.blocked(f)
	case FaultNodeReset, FaultNodeStall:
		detail, err = n.nodeLink(f)
	}
	switch {
	case err != nil:
		n.event(f, "error", fmt.Sprintf("%s: %v", detail, err))
	default:
		n.event(f, "end", detail)
	}
}

func (n *nemesis) sidecar(f Fault) (string, error) {
	sc := n.f.Sidecars[f.Target%len(n.f.Sidecars)]
	d := fmt.Sprintf("sidecar %d", sc.N)
	switch f.Kind {
	case FaultSidecarKill:
		n.event(f, "start", d+": SIGKILL")
		if err := sc.Kill(); err != nil {
			return d, err
		}
		time.Sleep(f.For / 4)
		if err := sc.Start(); err != nil {
			return d, err
		}
		began := time.Now()
		err := sc.WaitReady(20 * time.Second)
		return fmt.Sprintf("%s: restarted, ready after %v", d, time.Since(began).Round(time.Millisecond)), err
	case FaultSidecarStop:
		stop := CallTimeout + f.For/2
		n.event(f, "start", fmt.Sprintf("%s: SIGSTOP for %v", d, stop))
		if err := sc.Signal(syscall.SIGSTOP); err != nil {
			return d, err
		}
		time.Sleep(stop)
		return d + ": SIGCONT", sc.Signal(syscall.SIGCONT)
	default:
		n.event(f, "start", d+": SIGHUP")
		return d + ": reloaded", sc.Signal(syscall.SIGHUP)
	}
}

// primary kills or freezes a set's primary, and waits until the set has
// a primary and a synchronised replica again.
func (n *nemesis) primary(f Fault) (string, error) {
	s := n.f.Sets[f.Target%len(n.f.Sets)]
	p, err := s.Primary()
	if err != nil {
		n.event(f, "start", s.Name+": skipped")
		return s.Name, err
	}
	r := s.Other(p)
	if st, _ := r.Replication("master_link_status"); st != "up" {
		n.event(f, "start", fmt.Sprintf("%s: skipped, replica %s not synchronised", s.Name, r.Addr))
		return s.Name + ": skipped", r.WaitSynced(30 * time.Second)
	}
	d := fmt.Sprintf("%s: primary %s", s.Name, p.Addr)
	began := time.Now()
	if f.Kind == FaultPrimaryKill {
		n.stats(s.Name, p, "module")
		n.event(f, "start", d+": SIGKILL")
		if err := p.Kill(); err != nil {
			return d, err
		}
		if err := waitPrimary(s, r, 30*time.Second); err != nil {
			return d, err
		}
		promoted := time.Since(began)
		time.Sleep(f.For / 4)
		// Back as the promoted node's replica, promotable once it holds
		// the data (node.HA.Rejoin).
		err := s.HA.Rejoin(p, node.Options{Role: node.Module, ReplicaOf: r.Addr, Server: n.f.Server}, 30*time.Second)
		if err == nil {
			err = quickSync(p)
		}
		return fmt.Sprintf("%s: replica %s promoted after %v; back as its replica after %v", d, r.Addr, promoted.Round(time.Millisecond), time.Since(began).Round(time.Millisecond)), err
	}
	stop := n.f.Sets[0].HA.Opts.DownAfter + 1500*time.Millisecond + f.For
	n.event(f, "start", fmt.Sprintf("%s: SIGSTOP for %v", d, stop))
	if err := p.Freeze(); err != nil {
		return d, err
	}
	time.Sleep(stop)
	if err := p.Thaw(); err != nil {
		return d, err
	}
	// The sentinels turn a stale primary into a replica of the promoted
	// one, or it stays the primary if none was promoted.
	cur, err := waitAnyPrimary(s, 30*time.Second)
	if err != nil {
		return d, err
	}
	other := s.Other(cur)
	err = other.WaitSynced(30 * time.Second)
	return fmt.Sprintf("%s: SIGCONT; primary now %s, replica %s synchronised after %v", d, cur.Addr, other.Addr, time.Since(began).Round(time.Millisecond)), err
}

// waitPrimary waits until the sentinels name want and it answers ROLE master.
func waitPrimary(s *MasterSet, want *node.Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p, err := s.Primary()
		if err == nil && p == want {
			if role, _ := want.Role(); role == "master" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not promoted after %v (%v)", s.Name, want.Addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAnyPrimary waits until the node the sentinels name answers ROLE
// master and the other one is its replica.
func waitAnyPrimary(s *MasterSet, timeout time.Duration) (*node.Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		p, err := s.Primary()
		if err == nil {
			role, _ := p.Role()
			other, _ := s.Other(p).Role()
			host, _ := s.Other(p).Replication("master_port")
			if role == "master" && other == "slave" && host == fmt.Sprint(p.Port) {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: no settled primary after %v (%v)", s.Name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *nemesis) network(f Fault) (string, error) {
	sc := n.f.Sidecars[f.Target%len(n.f.Sidecars)]
	relay, side := sc.Relay, fmt.Sprintf("workers -> sidecar %d", sc.N)
	if f.Other%2 == 1 {
		relay, side = sc.Scripts, fmt.Sprintf("sidecar %d -> %s", sc.N, ScriptsC)
	}
	ctx := context.Background()
	switch f.Kind {
	case FaultNetCut:
		n.event(f, "start", fmt.Sprintf("%s: cut for %v", side, f.For))
		relay.Stop()
		time.Sleep(f.For)
		return side + ": restored", relay.Start()
	case FaultNetSlow:
		ms := 50 + f.For.Milliseconds()/10
		n.event(f, "start", fmt.Sprintf("%s: %d ms latency each way for %v", side, ms, f.For))
		var names []string
		for _, dir := range []string{"upstream", "downstream"} {
			name := "slow-" + dir
			if _, err := relay.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(`{"name":%q,"type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`, name, dir, ms, ms/2))); err != nil {
				return side, err
			}
			names = append(names, name)
		}
		time.Sleep(f.For)
		for _, name := range names {
			_ = relay.Toxics.RemoveToxic(ctx, name)
		}
		return side + ": latency removed", nil
	case FaultNetStall:
		n.event(f, "start", fmt.Sprintf("%s: stalled for %v, then its connections close", side, f.For))
		if _, err := relay.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(`{"name":"stall","type":"timeout","stream":"downstream","attributes":{"timeout":%d}}`, f.For.Milliseconds()))); err != nil {
			return side, err
		}
		time.Sleep(f.For)
		return side + ": stall removed", relay.Toxics.RemoveToxic(ctx, "stall")
	default:
		d := 100*time.Millisecond + f.For/8
		n.event(f, "start", fmt.Sprintf("%s: connections reset for %v", side, d))
		if _, err := relay.Toxics.AddToxicJson(strings.NewReader(`{"name":"reset","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`)); err != nil {
			return side, err
		}
		time.Sleep(d)
		return side + ": reset removed", relay.Toxics.RemoveToxic(ctx, "reset")
	}
}

// nodeLink faults the links between the sidecars and a node from the
// node's side (the module nodes are found through Sentinel, so no relay
// sits on those links): every normal client connection closed, or every
// client paused. Replication links are not touched.
func (n *nemesis) nodeLink(f Fault) (string, error) {
	var nd *node.Node
	name := ScriptsC
	if i := f.Target % 3; i < len(n.f.Sets) {
		s := n.f.Sets[i]
		p, err := s.Primary()
		if err != nil {
			n.event(f, "start", s.Name+": skipped")
			return s.Name, err
		}
		nd, name = p, s.Name
	} else {
		nd = n.f.Scripts
	}
	c, err := dial(nd.Addr)
	if err != nil {
		n.event(f, "start", name+": skipped")
		return name, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if f.Kind == FaultNodeReset {
		n.event(f, "start", fmt.Sprintf("%s %s: CLIENT KILL TYPE normal", name, nd.Addr))
		k, err := c.Do(ctx, c.B().Arbitrary("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Build()).AsInt64()
		return fmt.Sprintf("%s: %d connections closed", name, k), err
	}
	ms := 200 + f.For.Milliseconds()/2
	n.event(f, "start", fmt.Sprintf("%s %s: CLIENT PAUSE %d ALL", name, nd.Addr, ms))
	if err := c.Do(ctx, c.B().Arbitrary("CLIENT", "PAUSE", fmt.Sprint(ms), "ALL").Build()).Error(); err != nil {
		return name, err
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
	return name + ": pause over", nil
}

// heal undoes every network fault and restarts any sidecar that is not running.
func (n *nemesis) heal() {
	ctx := context.Background()
	for _, sc := range n.f.Sidecars {
		for _, r := range []interface {
			Start() error
		}{sc.Relay, sc.Scripts} {
			_ = r.Start()
		}
		for _, name := range []string{"slow-upstream", "slow-downstream", "stall", "reset"} {
			_ = sc.Relay.Toxics.RemoveToxic(ctx, name)
			_ = sc.Scripts.Toxics.RemoveToxic(ctx, name)
		}
		_ = sc.Signal(syscall.SIGCONT)
	}
}

// move moves a queue to another upstream with the binary's mover,
// deleting the source's copy; a killed mover is resumed. A move that
// fails is resumed, then aborted.
func (n *nemesis) move(f Fault) (string, error) {
	q := n.queues[f.Target%len(n.queues)]
	n.mu.Lock()
	from := n.owner[q]
	n.mu.Unlock()
	var targets []string
	for _, u := range Upstreams {
		if u != from {
			targets = append(targets, u)
		}
	}
	to := targets[f.Other%len(targets)]
	d := fmt.Sprintf("%s: %s -> %s", q, from, to)
	args := []string{"move", q, "--to", to, "--delete-source", "--replace"}
	n.moves.Add(1)
	if f.Kind == FaultMoveStopped {
		n.event(f, "start", d+", mover stopped once it holds the queue, aborted, continued")
		return n.stopAbort(f, q, from, d, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if f.Kind == FaultMoveKilled {
		n.event(f, "start", d+", mover killed after "+f.Step)
		if out, err := n.killedMover(ctx, f.Step, args...); err != nil {
			d += fmt.Sprintf("; the mover did not reach %s: %v: %s", f.Step, err, lastLine(out))
		}
		args = []string{"move", q, "--resume", "--delete-source"}
	} else {
		n.event(f, "start", d)
	}
	out, err := n.mover(ctx, args...)
	if err != nil {
		d += fmt.Sprintf("; %s: %v: %s", strings.Join(args, " "), err, lastLine(out))
		if out2, err2 := n.mover(ctx, "move", q, "--resume", "--delete-source"); err2 != nil {
			d += fmt.Sprintf("; resume: %v: %s", err2, lastLine(out2))
			// The abort is the clean-up, with time of its own: the move
			// and the resume may have used all of theirs, and a move
			// left in progress refuses the next move of the queue.
			actx, acancel := context.WithTimeout(context.Background(), cleanupFor)
			defer acancel()
			if out3, err3 := n.mover(actx, "move", q, "--abort"); err3 != nil {
				d += fmt.Sprintf("; abort: %v: %s", err3, lastLine(out3))
			} else {
				d += "; aborted"
			}
		} else {
			d += "; resumed"
		}
	} else {
		d += "; moved"
	}
	sctx, scancel := context.WithTimeout(context.Background(), cleanupFor)
	defer scancel()
	n.refreshOwners(sctx)
	n.mu.Lock()
	now := n.owner[q]
	n.mu.Unlock()
	d += "; owner now " + now
	if now == from {
		return d, errNotMoved
	}
	return d, nil
}

// cleanupFor bounds what follows a move fault: the abort of a move that
// did not end, and the read of the table after it.
const cleanupFor = time.Minute

// errNotMoved marks a move that left the queue where it was (refused
// while a node was down, or aborted).
var errNotMoved = errors.New("the queue did not move")

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// mover runs `emqproxy queue` with args. A move (an --abort too) gets a
// --deadline of half the time ctx leaves: it waits out the faults it can
// within that (control.Mover.MayResume, control.AbortMayRetry) and ends
// with its own error rather than killed by ctx, with time left for what
// follows it (a --resume, an --abort, the read of the table).
func (n *nemesis) mover(ctx context.Context, args ...string) (string, error) {
	args = withDeadline(ctx, args)
	cmd := exec.CommandContext(ctx, n.f.Bin, append([]string{"queue"}, append(args, "--config", n.f.MoverCfg)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	out, err := cmd.CombinedOutput()
	n.moverLog(began, args, string(out), err)
	return string(out), err
}

// withDeadline gives a move or an abort a --deadline of half the time ctx
// leaves (none without a deadline).
func withDeadline(ctx context.Context, args []string) []string {
	if dl, ok := ctx.Deadline(); ok && args[0] == "move" {
		return append(slices.Clip(args), "--deadline", (time.Until(dl) / 2).Round(time.Second).String())
	}
	return args
}

// moverLog appends a mover's whole output to movers.log in the fleet's
// directory, for the one who reads a violation around a move.
func (n *nemesis) moverLog(began time.Time, args []string, out string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, ferr := os.OpenFile(filepath.Join(n.f.Dir, "movers.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if ferr != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s .. %s queue %s: %v\n%s\n", began.UTC().Format("15:04:05.000"), time.Now().UTC().Format("15:04:05.000"), strings.Join(args, " "), err, out)
}

// killedMover runs a mover that stops after step and kills it there.
func (n *nemesis) killedMover(ctx context.Context, step string, args ...string) (string, error) {
	args = withDeadline(ctx, args)
	cmd := exec.CommandContext(ctx, n.f.Bin, append([]string{"queue"}, append(args, "--config", n.f.MoverCfg, "--stop-after", step)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var b strings.Builder
	began := time.Now()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
		if sc.Text() == "stopped after "+step {
			err := cmd.Process.Signal(syscall.SIGKILL)
			n.moverLog(began, append(args, "--stop-after", step), b.String()+"(killed)\n", err)
			return b.String(), err
		}
	}
	n.moverLog(began, append(args, "--stop-after", step), b.String(), fmt.Errorf("exited before the step"))
	return b.String(), fmt.Errorf("exited before the step")
}

// refreshOwners reads the merged control table: each moved queue's owner
// and whether a move of it is still in progress (held, or a record at any
// step).
func (n *nemesis) refreshOwners(ctx context.Context) (moving []string) {
	var nodes, table string
	for attempt := 0; ; attempt++ {
		out, err := n.mover(ctx, "status")
		var ok bool
		if nodes, table, ok = strings.Cut(out, "\ntable: epoch"); err == nil && ok {
			break
		}
		if attempt == 10 {
			n.h.Add(Event{Kind: KindInfo, Proc: "nemesis", Detail: fmt.Sprintf("queue status: %v: %s", err, lastLine(out))})
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	// A move at step copying has a record ("  MOVE q: ...") and no entry
	// in the table yet: it is in progress too (a failed copy whose record
	// could not be given up), and its copy is on its target.
	for _, line := range strings.Split(nodes, "\n") {
		if rest, ok := strings.CutPrefix(line, "  MOVE "); ok {
			if q, _, ok := strings.Cut(rest, ":"); ok && !slices.Contains(moving, q) {
				if _, known := n.owner[q]; known {
					moving = append(moving, q)
				}
			}
		}
	}
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		q := strings.TrimSuffix(fields[0], ":")
		if _, known := n.owner[q]; !known {
			continue
		}
		switch {
		case fields[1] == "owned":
			n.owner[q] = fields[2]
		case !slices.Contains(moving, q):
			moving = append(moving, q)
		}
	}
	return moving
}

// finishMoves resumes, then aborts, any move still in progress.
func (n *nemesis) finishMoves(ctx context.Context) []string {
	var notes []string
	for range 3 {
		moving := n.refreshOwners(ctx)
		if len(moving) == 0 {
			return notes
		}
		for _, q := range moving {
			if out, err := n.mover(ctx, "move", q, "--resume", "--delete-source"); err != nil {
				notes = append(notes, fmt.Sprintf("%s: resume at the end: %v: %s", q, err, lastLine(out)))
				if out, err := n.mover(ctx, "move", q, "--abort"); err != nil {
					notes = append(notes, fmt.Sprintf("%s: abort at the end: %v: %s", q, err, lastLine(out)))
				}
			}
		}
	}
	return notes
}

// stats writes a node's command statistics to the history.
func (n *nemesis) stats(name string, nd *node.Node, role string) {
	counts, err := nodeStats(nd)
	if err != nil {
		n.h.Add(Event{Kind: KindInfo, Proc: "nemesis", Node: name + "@" + nd.Addr, Detail: "stats: " + err.Error()})
		return
	}
	n.h.Add(Event{Kind: KindStats, Proc: "nemesis", Node: name + "@" + nd.Addr, Role: role, Counts: counts})
}

// nodeStats reads INFO commandstats (calls per command) and the count of
// ERR replies (errorstat_err).
func nodeStats(nd *node.Node) (map[string]int64, error) {
	c, err := dial(nd.Addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := node.CommandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	text, err := c.Do(ctx, c.B().Info().Section("errorstats").Build()).ToString()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_ERR:count="); ok {
			var x int64
			_, _ = fmt.Sscan(v, &x)
			counts["errorstat_err"] = x
		}
	}
	return counts, nil
}
