package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"
)

// Steps of a move, as recorded in {emqproxy}:move:<queue> on the source.
const (
	StepCopying  = "copying"  // keys are copied while the queue is served (nothing held)
	StepHeld     = "held"     // the queue is held on the source at Epoch
	StepCopied   = "copied"   // every key is on the target, verified
	StepFlipping = "flipping" // the flip began: it can only be completed
)

// Failpoints past the record's steps (Mover.StopAfter, Mover.Pause); the
// steps above are failpoints too, each right after its step is recorded.
const (
	FailBegin         = "begin"          // the move validated (a --hold-copy move's epoch chosen), nothing written
	FailTargetFlipped = "target-flipped" // the flip written on the target, not yet on the source
	FailFlipped       = "flipped"        // the flip written on both nodes
	FailDeleted       = "deleted"        // the source's keys deleted (DeleteSource), the record not yet removed
)

// Mover moves one queue between two nodes of a configuration.
type Mover struct {
	Queue string
	To    string
	// Nodes are every reachable upstream of the configuration, by name;
	// Down the others, with why.
	Nodes map[string]*table.Node
	Down  map[string]error
	// FileRoute is the upstream the configuration's routes give a queue.
	FileRoute func(queue string) string
	// CheckTarget runs the target's fence for the role the configuration
	// names (an error: not fenced, or not that role).
	CheckTarget func(ctx context.Context, n *table.Node) error
	// Replace allows a target that already has keys of the queue (they are
	// overwritten); DeleteSource deletes the source's keys after the flip.
	Replace, DeleteSource bool
	// Wait bounds the wait for the proxies' acknowledgements.
	Wait time.Duration
	// HoldCopy holds the queue for the whole copy (every key with one
	// DUMP/RESTORE under the hold, no tracking): for small queues, or a
	// source that refuses CONFIG SET.
	HoldCopy bool
	// Rate paces the copy while the queue is served, in bytes of values
	// per second (0: as fast as the nodes answer). Under the hold the copy
	// is never paced.
	Rate int64
	// Track is how the copy while served learns what changes on the
	// source: TrackAuto (the default), TrackReplication or TrackKeyspace.
	Track string
	// MaxHold bounds the copy under the hold: past it the queue is
	// released and copied again while served (default DefaultMaxHold).
	MaxHold time.Duration
	// ReplicaWait is how long, before a hold, the mover waits for the
	// replicas of the source and the target to confirm its writes while
	// the queue is served (0: it asks nothing before the hold, whose own
	// confirmations refuse at once). queue move sets DefaultReplicaWait,
	// bounded by its --deadline.
	ReplicaWait time.Duration
	// Until is when the command's --deadline ends (zero: no deadline):
	// the waits before a hold end then at the latest, so that an attempt
	// begun near the deadline does not wait a whole ReplicaWait past it.
	Until time.Time
	// LargeKey is the MEMORY USAGE past which a key is copied in chunks
	// (default DefaultLargeKey); Chunk the elements per command (default
	// DefaultChunk); TailKeys the changed keys a round may leave for the
	// hold (default DefaultTailKeys).
	LargeKey int64
	Chunk    int
	TailKeys int
	// ProgressEvery is how often progress is printed and stored (default 1s).
	ProgressEvery time.Duration
	// StopAfter, when set to a step or a failpoint (Fail*), makes Run stop
	// there as if killed (tests of --resume and --abort).
	StopAfter string
	// Pause, when set, is called at every step and failpoint with its name,
	// before StopAfter is looked at: a test blocks in it to stall the mover
	// there (as a process stopped, or a host paused) while another command
	// runs, then lets it go on.
	Pause func(step string)
	// Out gets one line per step.
	Out io.Writer

	// token is the fence token of the record this mover wrote or took
	// over last (MayResume).
	token string
}

func (m *Mover) largeKey() int64 {
	if m.LargeKey > 0 {
		return m.LargeKey
	}
	return keycopy.DefaultLargeKey
}

func (m *Mover) maxHold() time.Duration {
	if m.MaxHold > 0 {
		return m.MaxHold
	}
	return DefaultMaxHold
}

func (m *Mover) tailKeys() int {
	if m.TailKeys > 0 {
		return m.TailKeys
	}
	return DefaultTailKeys
}

// Report is what a move did.
type Report struct {
	Queue, From, To string
	HoldCopy        bool // the whole copy was made under the hold
	HoldEpoch       int64
	FlipEpoch       int64
	Keys            int                   // keys of the queue moved
	Rows            int64                 // of which job rows
	Other           []string              // keys under the hashtag that are not job-core keys
	Jobs            map[string]int64      // jobs per state: the job-core sets' sizes at the flip
	Held            time.Duration         // from the hold to the flip
	HoldWork        time.Duration         // the copy under the hold, after every proxy acknowledged
	PreCopy         time.Duration         // the copy while served, before the (last) hold
	Rounds          int                   // rounds of copy while served
	Released        int                   // holds released because their copy passed MaxHold
	TailKeys        int                   // keys copied under the hold
	Copied          int64                 // keys written (a key copied again counts again)
	Bytes           int64                 // bytes of values written
	Chunked         int64                 // keys copied in chunks
	Longest         []keycopy.RoundTrip   // the longest round trip to each node
	Slowest         []keycopy.SlowCommand // the slowest command of the mover each node's SLOWLOG kept
	Tracking        string                // where the changes came from
	Events          int64                 // changes recorded (notifications, or the stream's writes to the queue)
	Patched         int64                 // elements of large keys written by member patches
	Restarts        int                   // times the tracking was lost and restarted
	Acked           []string              // proxies that acknowledged the hold
	WaitedOut       []string              // proxies whose lease expired instead
	SourceDeleted   bool
}

// ErrStopped is returned by Run when StopAfter stopped it.
var ErrStopped = errors.New("stopped")

// ErrUnreachable is wrapped (with ErrMove) when the move needs an upstream
// it cannot reach now: a command that waits (--deadline) tries again.
var ErrUnreachable = errors.New("unreachable")

func (m *Mover) say(format string, args ...any) {
	if m.Out != nil {
		fmt.Fprintf(m.Out, format+"\n", args...)
	}
}

func (m *Mover) stop(step string) error {
	if m.Pause != nil {
		m.Pause(step)
	}
	if m.StopAfter == step {
		m.say("stopped after %s", step)
		return ErrStopped
	}
	return nil
}

// Owner returns who serves queue now: the table's owner (or, while held,
// the node holding it) when the queue was moved, else the file's route;
// and the merged table's entry, if any. It reads the nodes it can and
// skips the others; the mover decides on every node's table instead
// (Mover.owner).
func Owner(ctx context.Context, nodes map[string]*table.Node, fileRoute func(string) string, queue string) (string, *table.Entry, error) {
	var tables []table.Table
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		t, err := nodes[name].ReadTable(ctx)
		if err != nil && !errors.Is(err, table.ErrTable) {
			continue // an unreachable node (the mover refuses instead: Mover.table)
		}
		tables = append(tables, t)
	}
	e, ok := table.Merge(tables...).Queues[queue]
	if !ok {
		return fileRoute(queue), nil, nil
	}
	return e.Owner, &e, nil
}

// reachable refuses a change of the control table while an upstream of
// the configuration is unreachable. The table is spread over the nodes: a
// flip is written on its two nodes, a hold, a release or an abort on the
// source alone, so the entry that decides a queue's owner may be on one
// node only. Decided without it, a move or an abort can act on an older
// entry (the hold of a move whose flip is on the unreachable node) and give
// the queue, at a new epoch above the live one, to a node whose copy is
// old (bench/results/2026-12-02-1403-83d215b-chaos.md, queue charlie1).
func (m *Mover) reachable() error {
	for _, name := range slices.Sorted(maps.Keys(m.Down)) {
		return fmt.Errorf("%w: upstream %s is %w (%v): %s", table.ErrMove, name, ErrUnreachable, m.Down[name], table.NeedAll)
	}
	return nil
}

// table reads the control table of every upstream, merged; an upstream
// that cannot be read refuses the move (reachable).
func (m *Mover) table(ctx context.Context) (table.Table, error) {
	if err := m.reachable(); err != nil {
		return table.Table{}, err
	}
	var tables []table.Table
	for _, name := range slices.Sorted(maps.Keys(m.Nodes)) {
		t, err := m.Nodes[name].ReadTable(ctx)
		if err != nil && !errors.Is(err, table.ErrTable) {
			return table.Table{}, fmt.Errorf("%w: upstream %s is %w (reading its control table: %v): %s", table.ErrMove, name, ErrUnreachable, err, table.NeedAll)
		}
		tables = append(tables, t)
	}
	return table.Merge(tables...), nil
}

// owner is Owner over every upstream's table (table): who serves the
// queue now, and the merged entry, if any.
func (m *Mover) owner(ctx context.Context) (string, *table.Entry, error) {
	t, err := m.table(ctx)
	if err != nil {
		return "", nil, err
	}
	e, ok := t.Queues[m.Queue]
	if !ok {
		return m.FileRoute(m.Queue), nil, nil
	}
	return e.Owner, &e, nil
}

// maxEpoch is the highest epoch of every upstream (table) and of every
// epoch a proxy registered on one says it applied there: a new entry above
// it outranks every entry of the queue on every node, and is newer than
// any table a proxy has seen. A proxy never goes back to an older table of
// a node (tables only move forward); a node that lost its last table
// writes (restarted without them, or failed over to a replica that had
// not received them) would otherwise get epochs its proxies saw already,
// which they would not apply, and their registrations, renewed with the
// epoch they applied, would acknowledge a hold they never saw. A
// registration that does not parse is passed over (queue status names it).
func (m *Mover) maxEpoch(ctx context.Context) (int64, error) {
	t, err := m.table(ctx)
	if err != nil {
		return 0, err
	}
	top := t.Epoch
	for _, name := range slices.Sorted(maps.Keys(m.Nodes)) {
		regs, err := m.Nodes[name].Proxies(ctx)
		if err != nil && !errors.Is(err, table.ErrTable) {
			return 0, fmt.Errorf("%w: upstream %s is %w (reading its proxies: %v): %s", table.ErrMove, name, ErrUnreachable, err, table.NeedAll)
		}
		for _, r := range regs {
			top = max(top, r.Applied)
		}
	}
	return top, nil
}

// findRecord looks for the queue's move record on every node. A node that
// cannot be read is an error: its record may be the one.
func (m *Mover) findRecord(ctx context.Context) (*record, error) {
	if err := m.reachable(); err != nil {
		return nil, err
	}
	return m.firstRecord(ctx, "")
}

// firstRecord is the queue's first move record on the nodes but except,
// in the order of their names.
func (m *Mover) firstRecord(ctx context.Context, except string) (*record, error) {
	for _, name := range slices.Sorted(maps.Keys(m.Nodes)) {
		if name == except {
			continue
		}
		r, err := readRecord(ctx, m.Nodes[name], m.Queue)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the move record of %s on %s (%w): %v: %s", table.ErrMove, m.Queue, name, ErrUnreachable, err, table.NeedAll)
		}
		if r != nil {
			return r, nil
		}
	}
	return nil, nil
}

// Run starts a move: it validates the target, copies every key while the
// queue is served (tracking the source's changes), holds the queue for
// what changed last, and flips; with HoldCopy it holds the queue for the
// whole copy instead.
func (m *Mover) Run(ctx context.Context) (*Report, error) {
	if m.Queue == "" || strings.ContainsAny(m.Queue, "{}") {
		return nil, fmt.Errorf("%w: queue %q is not a queue name (no braces)", table.ErrMove, m.Queue)
	}
	if err, ok := m.Down[m.To]; ok {
		return nil, fmt.Errorf("%w: target %s is %w: %v", table.ErrMove, m.To, ErrUnreachable, err)
	}
	to := m.Nodes[m.To]
	if to == nil {
		return nil, fmt.Errorf("%w: --to %q is not an upstream of the configuration (%s)", table.ErrMove, m.To, strings.Join(slices.Sorted(maps.Keys(m.Nodes)), ", "))
	}
	if rec, err := m.findRecord(ctx); err != nil {
		return nil, err
	} else if rec != nil {
		return nil, fmt.Errorf("%w: queue %s is already moving (%s -> %s, step %s): finish it with --resume or roll it back with --abort",
			table.ErrMove, m.Queue, rec.from, rec.to, rec.step)
	}
	from, e, err := m.owner(ctx)
	if err != nil {
		return nil, err
	}
	if e != nil && e.State == table.Held {
		return nil, fmt.Errorf("%w: queue %s is held on %s with no move record: run with --abort to release it", table.ErrMove, m.Queue, e.Owner)
	}
	if from == m.To {
		return nil, fmt.Errorf("%w: queue %s is already served by %s", table.ErrMove, m.Queue, m.To)
	}
	if err, ok := m.Down[from]; ok {
		return nil, fmt.Errorf("%w: source %s (serving %s) is %w: %v", table.ErrMove, from, m.Queue, ErrUnreachable, err)
	}
	src := m.Nodes[from]
	if src == nil {
		return nil, fmt.Errorf("%w: queue %s is served by %q, which is not an upstream of the configuration", table.ErrMove, m.Queue, from)
	}
	if err := m.validate(ctx, src, to); err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	rec := &record{from: from, to: m.To, replace: m.Replace, holdCopy: m.HoldCopy, deleteSource: m.DeleteSource, started: now}
	if m.HoldCopy {
		// The hold is this move's first write: it creates the record
		// (hold), only if there is none.
		rec.token, rec.by = newToken(), moverID("move")
		m.token = rec.token
		top, err := m.maxEpoch(ctx)
		if err != nil {
			return nil, err
		}
		rec.epoch, rec.held = top+1, now
		if err := m.stop(FailBegin); err != nil {
			return nil, err
		}
		if err := m.hold(ctx, src, rec); err != nil {
			return nil, err
		}
	} else if err := m.stop(FailBegin); err != nil {
		return nil, err
	} else if err := m.begin(ctx, src, rec); err != nil {
		return nil, err
	}
	return m.complete(ctx, rec)
}

// validate refuses a move before anything is held: an unreachable source or
// target, a target not fenced as its configured role, a target that has keys
// of the queue (unless Replace).
func (m *Mover) validate(ctx context.Context, src, to *table.Node) error {
	for _, n := range []*table.Node{src, to} {
		if err := n.C.Do(ctx, n.C.B().Ping().Build()).Error(); err != nil {
			return fmt.Errorf("%w: upstream %s is %w: %v", table.ErrMove, n.Name, ErrUnreachable, err)
		}
	}
	if m.CheckTarget != nil {
		if err := m.CheckTarget(ctx, to); err != nil {
			return fmt.Errorf("%w: target %s: %v", table.ErrMove, to.Name, err)
		}
	}
	keys, err := keycopy.ScanQueue(ctx, to, m.Queue, 1)
	if err != nil {
		return fmt.Errorf("%w: target %s: %v", table.ErrMove, to.Name, err)
	}
	if len(keys) > 0 && !m.Replace {
		return fmt.Errorf("%w: target %s already has keys of queue %s (%s, ...): refused without --replace", table.ErrMove, to.Name, m.Queue, keys[0])
	}
	return nil
}

// hold marks the queue held on the source at rec.epoch and records the
// move at step held, then confirms both on the source's replicas.
//
// The hold is what keeps the proxies off the source while the tail is
// copied and the queue flipped. Lost in a failover of the source, it takes
// its record with it (one transaction), and the proxies, reading the
// promoted node's table, serve the queue on the source again while the
// mover goes on to the flip: the writes of that window are lost. So a hold
// the replicas do not confirm is given back at once (release) and the move
// stops; nothing was copied under it.
func (m *Mover) hold(ctx context.Context, src *table.Node, rec *record) error {
	c := src.C
	// A move copying while served holds from step copying, its record
	// its own; a --hold-copy move begins with its hold, and two started
	// at once cannot both hold: the first creates the record, the second
	// finds it there. The queue's entry must be older than the hold's
	// either way.
	f := own(rec, StepCopying)
	if rec.holdCopy {
		f = &fence{absent: true}
	}
	rec.step = StepHeld
	err := m.fenced(ctx, src, f, &table.Entry{Epoch: rec.epoch, State: table.Held, Owner: rec.from}, func() valkey.Commands {
		return recordCmds(c, m.Queue, rec)
	})
	var se *supersededError
	if rec.holdCopy && errors.As(err, &se) {
		return fmt.Errorf("%w: queue %s is already moving (a mover began at the same time: %s)", table.ErrMove, m.Queue, se.why)
	}
	if err != nil {
		return stepErr(err, "holding on %s", src.Name)
	}
	if err := src.Confirm(ctx); err != nil {
		if rerr := m.release(ctx, src, rec); rerr != nil {
			return fmt.Errorf("%w: the hold of %s: %v; %v", table.ErrMove, m.Queue, err, rerr)
		}
		then := "--resume tries again, --abort drops the move"
		if rec.holdCopy {
			then = "the move is dropped (nothing was copied): run it again"
		}
		return fmt.Errorf("%w: the hold of %s: %v: released, %s serves the queue again; %s", table.ErrMove, m.Queue, err, src.Name, then)
	}
	m.say("held %s on %s at epoch %d", m.Queue, src.Name, rec.epoch)
	return nil
}

// Resume completes the move in progress of the queue.
func (m *Mover) Resume(ctx context.Context) (*Report, error) {
	rec, err := m.findRecord(ctx)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: queue %s has %w", table.ErrMove, m.Queue, ErrNoMove)
	}
	if m.Nodes[rec.from] == nil || m.Nodes[rec.to] == nil {
		return nil, fmt.Errorf("%w: the move of %s names %s -> %s, not both upstreams of the configuration", table.ErrMove, m.Queue, rec.from, rec.to)
	}
	// Copying and held copy again (deleting the target's keys first) or
	// release the queue to the source; copied and flipping flip it to the
	// target: never for a move that is over (stale.go).
	if done, e, err := m.stale(ctx, rec); err != nil {
		return nil, err
	} else if done {
		return nil, m.dropStale(ctx, rec, e)
	} else if rec.flippedAt(e) {
		return m.completeFlip(ctx, rec, e)
	}
	// The move becomes this mover's: a mover of it that is still running
	// (stalled, not killed) stops at its next write.
	if err := m.takeOver(ctx, m.Nodes[rec.from], rec, "resume"); err != nil {
		return nil, err
	}
	m.To = rec.to
	m.Replace = rec.replace
	m.say("resuming the move of %s from %s to %s at step %s", m.Queue, rec.from, rec.to, rec.step)
	return m.complete(ctx, rec)
}

// complete runs the steps from rec.step on.
func (m *Mover) complete(ctx context.Context, rec *record) (*Report, error) {
	src, dst := m.Nodes[rec.from], m.Nodes[rec.to]
	rep := &Report{Queue: m.Queue, From: rec.from, To: rec.to, HoldCopy: rec.holdCopy}
	if rec.step == StepHeld && !rec.holdCopy {
		// The changes made since the mover stopped are unknown: copying
		// again while served keeps the hold short.
		if err := m.release(ctx, src, rec); err != nil {
			return rep, stepErr(err, "releasing the hold")
		}
		m.say("released %s on %s: copying again while it is served", m.Queue, src.Name)
	}
	switch rec.step {
	case StepCopying:
		if err := m.online(ctx, src, dst, rec, rep); err != nil {
			return rep, err
		}
	case StepHeld:
		if err := m.stop(StepHeld); err != nil {
			return rep, err
		}
		if err := m.holdCopyAll(ctx, src, dst, rec, rep); err != nil {
			return rep, err
		}
	case StepCopied, StepFlipping:
		// The copy was verified before it was recorded; check which
		// proxies acknowledged the hold again, and take its counts.
		if err := m.waitAcks(ctx, src, rec.epoch, rep); err != nil {
			return rep, err
		}
		rep.Keys, rep.Rows, rep.Other = int(rec.keys), rec.rows, rec.other
	}
	rep.HoldEpoch = rec.epoch
	if err := m.stop(StepCopied); err != nil {
		return rep, err
	}
	var err error
	if rep.Jobs, err = jobCounts(ctx, src, m.Queue); err != nil {
		return rep, err
	}
	if err := m.flip(ctx, src, dst, rec, rep); err != nil {
		return rep, err
	}
	rep.Held = time.Since(time.UnixMilli(rec.held))
	for _, n := range []*table.Node{src, dst} {
		rep.Slowest = append(rep.Slowest, keycopy.Slowest(ctx, n, n.Opts.ClientName, time.UnixMilli(rec.started)))
	}
	if err := m.stop(FailFlipped); err != nil {
		return rep, err
	}
	return rep, m.finish(ctx, src, rec, rep)
}

// finish ends a flipped move: the source's keys deleted (DeleteSource, or
// --delete-source asked when the move began), then the record removed
// and the source's keyspace notifications released. Each write is fenced:
// a mover that was superseded after its flip (another --resume took the
// move over, see completeFlip) stops and leaves the rest to it.
func (m *Mover) finish(ctx context.Context, src *table.Node, rec *record, rep *Report) error {
	if m.DeleteSource || rec.deleteSource {
		keys, err := keycopy.ScanQueue(ctx, src, m.Queue, 0)
		for lo := 0; err == nil && lo < len(keys); lo += 512 {
			part := keys[lo:min(lo+512, len(keys))]
			err = m.fenced(ctx, src, own(rec, StepFlipping), nil, func() valkey.Commands {
				return valkey.Commands{src.C.B().Unlink().Key(part...).Build()}
			})
		}
		if err != nil {
			return stepErr(err, "the move is done, deleting the source's keys failed (--resume deletes them)")
		}
		rep.SourceDeleted = true
		m.say("deleted %d keys of %s on %s", len(keys), m.Queue, src.Name)
		if err := m.stop(FailDeleted); err != nil {
			return err
		}
	}
	if err := m.fenced(ctx, src, own(rec, StepFlipping), nil, func() valkey.Commands { return deleteRecordCmds(src.C, m.Queue) }); err != nil {
		return stepErr(err, "the move is done, removing its record on %s failed (--resume removes it)", src.Name)
	}
	if _, err := tail.ReleaseNotify(ctx, src, m.Queue); err != nil {
		return fmt.Errorf("%w: the move is done; %v", table.ErrMove, err)
	}
	return nil
}

// holdCopyAll copies every key under the hold (HoldCopy): every proxy
// acknowledges the hold, then one DUMP/RESTORE per key, each verified.
func (m *Mover) holdCopyAll(ctx context.Context, src, dst *table.Node, rec *record, rep *Report) error {
	if err := m.waitAcks(ctx, src, rec.epoch, rep); err != nil {
		return err
	}
	t0 := time.Now()
	if err := m.checkRecord(ctx, src, rec); err != nil {
		return err // superseded while waiting: the target is not this mover's to wipe
	}
	cp := keycopy.NewCopier(src, dst, m.Queue, 0, 0, m.Chunk, nil)
	cp.Tell(m.say)
	if err := m.wipeTarget(ctx, cp, rec); err != nil {
		return err
	}
	err := cp.ScanSource(ctx, func(keys []string, _ float64) error {
		_, err := cp.CopyKeys(ctx, keys, false)
		return err
	})
	if err != nil {
		return err
	}
	if err := cp.SameServers(ctx); err != nil {
		return err
	}
	if err := cp.Recount(ctx); err != nil {
		return err
	}
	if err := m.setStep(ctx, src, rec, StepHeld, StepCopied, m.inventoryFields(cp)...); err != nil {
		return err
	}
	rep.HoldWork = time.Since(t0)
	m.fill(cp, nil, rep)
	m.say("copied and verified %d keys of %s from %s to %s under the hold", rep.Keys, m.Queue, src.Name, dst.Name)
	return nil
}

// jobCounts are the sizes of the queue's job-core sets on n.
func jobCounts(ctx context.Context, n *table.Node, queue string) (map[string]int64, error) {
	sets := keycopy.JobCore[:5]
	cmds := make(valkey.Commands, len(sets))
	for i, s := range sets {
		cmds[i] = n.C.B().Zcard().Key("emq:{" + queue + "}:" + s).Build()
	}
	out := map[string]int64{}
	for i, r := range n.C.DoMulti(ctx, cmds...) {
		v, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("%w: ZCARD %s on %s: %v", table.ErrMove, sets[i], n.Name, err)
		}
		if v > 0 {
			out[sets[i]] = v
		}
	}
	return out, nil
}

// waitAcks waits until every proxy registered on src acknowledged epoch or
// lost its lease, then closes the data connections of those that lost it
// (latewriters.go).
func (m *Mover) waitAcks(ctx context.Context, src *table.Node, epoch int64, rep *Report) error {
	wait := m.Wait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		regs, err := src.Proxies(ctx)
		if err != nil {
			return fmt.Errorf("%w: reading the proxies on %s: %v", table.ErrMove, src.Name, err)
		}
		var pending []string
		rep.Acked, rep.WaitedOut = nil, nil
		for _, r := range regs {
			switch {
			case r.Applied >= epoch:
				rep.Acked = append(rep.Acked, r.ID)
			case !r.Live:
				rep.WaitedOut = append(rep.WaitedOut, r.ID)
			default:
				pending = append(pending, r.ID)
			}
		}
		if len(pending) == 0 {
			m.say("every proxy acknowledged epoch %d (%d acknowledged, %d waited out)", epoch, len(rep.Acked), len(rep.WaitedOut))
			return m.closeWaitedOut(ctx, src, rep.WaitedOut) // latewriters.go
		}
		if time.Now().After(deadline) {
			slices.Sort(pending)
			return fmt.Errorf("%w: proxies %s did not acknowledge epoch %d within %v: the queue stays held; --resume waits again, --abort releases it",
				table.ErrMove, strings.Join(pending, ", "), epoch, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// flip gives the queue to the target at a new epoch: recorded as flipping
// on the source, written on the target, then on the source.
//
// Each write is fenced (fence.go). Step flipping is written only while the
// record is the mover's (at step copied, or flipping when resumed): a
// mover superseded before its flip stops there. The target holds no
// record; its write is conditional on the queue's entry there being older
// than the flip's. Once step flipping is recorded, only --resume can take
// the move over (--abort refuses), and a resumed flip's epoch is above
// every epoch it reads, the stalled mover's flip epoch included, or equal
// to it when the stalled mover had not written its flip anywhere yet: the
// stalled mover's write on the target then finds a newer entry and stops,
// or the very entry it was writing (rewriting it changes nothing) and
// stops at its write on the source, fenced on the record again.
func (m *Mover) flip(ctx context.Context, src, dst *table.Node, rec *record, rep *Report) error {
	top, err := m.maxEpoch(ctx)
	if err != nil {
		return fmt.Errorf("%w (nothing flipped: --resume)", err)
	}
	ep := top + 1
	e := table.Entry{Epoch: ep, State: table.Owned, Owner: rec.to}
	c := src.C
	if err := m.fenced(ctx, src, own(rec, StepCopied, StepFlipping), nil, func() valkey.Commands {
		return valkey.Commands{c.B().Hset().Key(table.MoveKey(m.Queue)).FieldValue().
			FieldValue("step", StepFlipping).FieldValue("flip_epoch", strconv.FormatInt(ep, 10)).Build()}
	}); err != nil {
		return stepErr(err, "recording the flip on %s", src.Name)
	}
	rec.step, rec.flipEpoch = StepFlipping, ep
	if err := m.stop(StepFlipping); err != nil {
		return err
	}
	for _, n := range []*table.Node{dst, src} {
		var f *fence
		if n == src {
			f = own(rec, StepFlipping)
		}
		err := m.fenced(ctx, n, f, &e, func() valkey.Commands { return nil })
		if err == nil {
			// The source's keys are deleted next: the flip must survive
			// a failover of either node first.
			err = n.Confirm(ctx)
		}
		if err != nil {
			return stepErr(err, "flipping on %s (the flip must be completed: --resume)", n.Name)
		}
		if n == dst {
			if err := m.stop(FailTargetFlipped); err != nil {
				return err
			}
		}
	}
	rep.FlipEpoch = ep
	m.say("flipped %s to %s at epoch %d", m.Queue, rec.to, ep)
	return nil
}

// unlink deletes keys on n, pipelined.
func unlink(ctx context.Context, n *table.Node, keys []string) error {
	for lo := 0; lo < len(keys); lo += 512 {
		part := keys[lo:min(lo+512, len(keys))]
		if err := n.C.Do(ctx, n.C.B().Unlink().Key(part...).Build()).Error(); err != nil {
			return err
		}
	}
	return nil
}
