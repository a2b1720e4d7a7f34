package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/rewrite"
)

// ErrMove is wrapped by every refusal and failure of a move.
var ErrMove = errors.New("queue move")

// Steps of a move, as recorded in {emqproxy}:move:<queue> on the source.
const (
	StepHeld     = "held"     // the queue is held on the source at Epoch
	StepCopied   = "copied"   // every key is on the target, verified
	StepFlipping = "flipping" // the flip began: it can only be completed
)

// Mover moves one queue between two nodes of a configuration.
type Mover struct {
	Queue string
	To    string
	// Nodes are every reachable upstream of the configuration, by name;
	// Down the others, with why.
	Nodes map[string]*Node
	Down  map[string]error
	// FileRoute is the upstream the configuration's routes give a queue.
	FileRoute func(queue string) string
	// CheckTarget runs the target's fence for the role the configuration
	// names (an error: not fenced, or not that role).
	CheckTarget func(ctx context.Context, n *Node) error
	// Replace allows a target that already has keys of the queue (they are
	// overwritten); DeleteSource deletes the source's keys after the flip.
	Replace, DeleteSource bool
	// Wait bounds the wait for the proxies' acknowledgements.
	Wait time.Duration
	// StopAfter, when set to a step, makes Run stop there as if killed
	// (tests of --resume and --abort).
	StopAfter string
	// Out gets one line per step.
	Out io.Writer
}

// Report is what a move did.
type Report struct {
	Queue, From, To string
	HoldEpoch       int64
	FlipEpoch       int64
	Keys            int
	Other           []string         // keys under the hashtag that are not job-core keys
	Jobs            map[string]int64 // job rows by state
	Held            time.Duration    // from the hold to the flip
	Acked           []string         // proxies that acknowledged the hold
	WaitedOut       []string         // proxies whose lease expired instead
	SourceDeleted   bool
}

// ErrStopped is returned by Run when StopAfter stopped it.
var ErrStopped = errors.New("stopped")

// record is a move in progress.
type record struct {
	from, to, step string
	epoch          int64
	replace        bool
	started        int64 // unix ms of the hold
}

func (m *Mover) say(format string, args ...any) {
	if m.Out != nil {
		fmt.Fprintf(m.Out, format+"\n", args...)
	}
}

func (m *Mover) stop(step string) error {
	if m.StopAfter == step {
		m.say("stopped after %s", step)
		return ErrStopped
	}
	return nil
}

// Owner returns who serves queue now: the table's owner (or, while held,
// the node holding it) when the queue was moved, else the file's route;
// and the merged table's entry, if any.
func Owner(ctx context.Context, nodes map[string]*Node, fileRoute func(string) string, queue string) (string, *Entry, error) {
	var tables []Table
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		t, err := nodes[name].ReadTable(ctx)
		if err != nil && !errors.Is(err, ErrTable) {
			continue // an unreachable node: its entries are on the others too
		}
		tables = append(tables, t)
	}
	e, ok := Merge(tables...).Queues[queue]
	if !ok {
		return fileRoute(queue), nil, nil
	}
	return e.Owner, &e, nil
}

// maxEpoch is the highest epoch of every reachable node.
func (m *Mover) maxEpoch(ctx context.Context) int64 {
	var top int64
	for _, n := range m.Nodes {
		if t, err := n.ReadTable(ctx); err == nil || errors.Is(err, ErrTable) {
			top = max(top, t.Epoch)
		}
	}
	return top
}

// readRecord reads the move record of the queue on n (nil: none).
func readRecord(ctx context.Context, n *Node, queue string) (*record, error) {
	f, err := n.C.Do(ctx, n.C.B().Hgetall().Key(MoveKey(queue)).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", n.Name, err)
	}
	if len(f) == 0 {
		return nil, nil
	}
	r := &record{from: f["from"], to: f["to"], step: f["step"], replace: f["replace"] == "1"}
	r.epoch, _ = strconv.ParseInt(f["epoch"], 10, 64)
	r.started, _ = strconv.ParseInt(f["started"], 10, 64)
	return r, nil
}

// findRecord looks for the queue's move record on every node.
func (m *Mover) findRecord(ctx context.Context) (*record, error) {
	for _, name := range slices.Sorted(maps.Keys(m.Nodes)) {
		r, err := readRecord(ctx, m.Nodes[name], m.Queue)
		if err != nil {
			continue
		}
		if r != nil {
			return r, nil
		}
	}
	return nil, nil
}

// Run starts a move: it validates the target, then holds, copies, verifies
// and flips.
func (m *Mover) Run(ctx context.Context) (*Report, error) {
	if m.Queue == "" || strings.ContainsAny(m.Queue, "{}") {
		return nil, fmt.Errorf("%w: queue %q is not a queue name (no braces)", ErrMove, m.Queue)
	}
	if err, ok := m.Down[m.To]; ok {
		return nil, fmt.Errorf("%w: target %s is unreachable: %v", ErrMove, m.To, err)
	}
	to := m.Nodes[m.To]
	if to == nil {
		return nil, fmt.Errorf("%w: --to %q is not an upstream of the configuration (%s)", ErrMove, m.To, strings.Join(slices.Sorted(maps.Keys(m.Nodes)), ", "))
	}
	if rec, err := m.findRecord(ctx); err != nil {
		return nil, err
	} else if rec != nil {
		return nil, fmt.Errorf("%w: queue %s is already moving (%s -> %s, step %s): finish it with --resume or roll it back with --abort",
			ErrMove, m.Queue, rec.from, rec.to, rec.step)
	}
	from, e, err := Owner(ctx, m.Nodes, m.FileRoute, m.Queue)
	if err != nil {
		return nil, err
	}
	if e != nil && e.State == Held {
		return nil, fmt.Errorf("%w: queue %s is held on %s with no move record: run with --abort to release it", ErrMove, m.Queue, e.Owner)
	}
	if from == m.To {
		return nil, fmt.Errorf("%w: queue %s is already served by %s", ErrMove, m.Queue, m.To)
	}
	if err, ok := m.Down[from]; ok {
		return nil, fmt.Errorf("%w: source %s (serving %s) is unreachable: %v", ErrMove, from, m.Queue, err)
	}
	src := m.Nodes[from]
	if src == nil {
		return nil, fmt.Errorf("%w: queue %s is served by %q, which is not an upstream of the configuration", ErrMove, m.Queue, from)
	}
	if err := m.validate(ctx, src, to); err != nil {
		return nil, err
	}
	rec := &record{from: from, to: m.To, replace: m.Replace, epoch: m.maxEpoch(ctx) + 1, started: time.Now().UnixMilli()}
	if err := m.hold(ctx, src, rec); err != nil {
		return nil, err
	}
	return m.complete(ctx, rec)
}

// validate refuses a move before anything is held: an unreachable source or
// target, a target not fenced as its configured role, a target that has keys
// of the queue (unless Replace).
func (m *Mover) validate(ctx context.Context, src, to *Node) error {
	for _, n := range []*Node{src, to} {
		if err := n.C.Do(ctx, n.C.B().Ping().Build()).Error(); err != nil {
			return fmt.Errorf("%w: upstream %s is unreachable: %v", ErrMove, n.Name, err)
		}
	}
	if m.CheckTarget != nil {
		if err := m.CheckTarget(ctx, to); err != nil {
			return fmt.Errorf("%w: target %s: %v", ErrMove, to.Name, err)
		}
	}
	keys, err := scanQueue(ctx, to, m.Queue, 1)
	if err != nil {
		return fmt.Errorf("%w: target %s: %v", ErrMove, to.Name, err)
	}
	if len(keys) > 0 && !m.Replace {
		return fmt.Errorf("%w: target %s already has keys of queue %s (%s, ...): refused without --replace", ErrMove, to.Name, m.Queue, keys[0])
	}
	return nil
}

// hold marks the queue held on the source at rec.epoch and records the move.
func (m *Mover) hold(ctx context.Context, src *Node, rec *record) error {
	c := src.C
	rep := "0"
	if rec.replace {
		rep = "1"
	}
	err := multi(ctx, c,
		c.B().Hset().Key(KeyQueues).FieldValue().FieldValue(m.Queue, Entry{Epoch: rec.epoch, State: Held, Owner: rec.from}.String()).Build(),
		c.B().Set().Key(KeyEpoch).Value(strconv.FormatInt(rec.epoch, 10)).Build(),
		c.B().Hset().Key(MoveKey(m.Queue)).FieldValue().FieldValue("from", rec.from).FieldValue("to", rec.to).
			FieldValue("epoch", strconv.FormatInt(rec.epoch, 10)).FieldValue("step", StepHeld).
			FieldValue("replace", rep).FieldValue("started", strconv.FormatInt(rec.started, 10)).Build(),
	)
	if err != nil {
		return fmt.Errorf("%w: holding on %s: %v", ErrMove, src.Name, err)
	}
	rec.step = StepHeld
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
		return nil, fmt.Errorf("%w: queue %s has no move in progress", ErrMove, m.Queue)
	}
	if m.Nodes[rec.from] == nil || m.Nodes[rec.to] == nil {
		return nil, fmt.Errorf("%w: the move of %s names %s -> %s, not both upstreams of the configuration", ErrMove, m.Queue, rec.from, rec.to)
	}
	m.To = rec.to
	m.Replace = rec.replace
	m.say("resuming the move of %s from %s to %s at step %s", m.Queue, rec.from, rec.to, rec.step)
	return m.complete(ctx, rec)
}

// complete runs the steps after the hold, from rec.step on.
func (m *Mover) complete(ctx context.Context, rec *record) (*Report, error) {
	src, dst := m.Nodes[rec.from], m.Nodes[rec.to]
	rep := &Report{Queue: m.Queue, From: rec.from, To: rec.to, HoldEpoch: rec.epoch}
	if err := m.stop(StepHeld); err != nil {
		return rep, err
	}
	if rec.step == StepHeld {
		if err := m.waitAcks(ctx, src, rec.epoch, rep); err != nil {
			return rep, err
		}
		if err := m.copy(ctx, src, dst, rep); err != nil {
			return rep, err
		}
		if err := src.C.Do(ctx, src.C.B().Hset().Key(MoveKey(m.Queue)).FieldValue().FieldValue("step", StepCopied).Build()).Error(); err != nil {
			return rep, fmt.Errorf("%w: recording the copy on %s: %v", ErrMove, src.Name, err)
		}
		rec.step = StepCopied
		if err := m.stop(StepCopied); err != nil {
			return rep, err
		}
	} else if rec.step == StepCopied || rec.step == StepFlipping {
		// The copy was verified before it was recorded; count what is
		// there, and which proxies acknowledged the hold (a check again).
		if err := m.waitAcks(ctx, src, rec.epoch, rep); err != nil {
			return rep, err
		}
		if err := m.copyReport(ctx, src, rep); err != nil {
			return rep, err
		}
	}
	if err := m.flip(ctx, src, dst, rec, rep); err != nil {
		return rep, err
	}
	rep.Held = time.Since(time.UnixMilli(rec.started))
	if m.DeleteSource {
		keys, err := scanQueue(ctx, src, m.Queue, 0)
		if err == nil {
			err = unlink(ctx, src, keys)
		}
		if err != nil {
			return rep, fmt.Errorf("%w: the move is done, deleting the source's keys failed (delete emq:{%s}:* on %s): %v",
				ErrMove, m.Queue, src.Name, err)
		}
		rep.SourceDeleted = true
		m.say("deleted %d keys of %s on %s", len(keys), m.Queue, src.Name)
	}
	if err := src.C.Do(ctx, src.C.B().Del().Key(MoveKey(m.Queue)).Build()).Error(); err != nil {
		return rep, fmt.Errorf("%w: the move is done, removing its record on %s failed: %v", ErrMove, src.Name, err)
	}
	return rep, nil
}

// waitAcks waits until every proxy registered on src acknowledged epoch or
// lost its lease.
func (m *Mover) waitAcks(ctx context.Context, src *Node, epoch int64, rep *Report) error {
	wait := m.Wait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		regs, err := src.Proxies(ctx)
		if err != nil {
			return fmt.Errorf("%w: reading the proxies on %s: %v", ErrMove, src.Name, err)
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
			return nil
		}
		if time.Now().After(deadline) {
			slices.Sort(pending)
			return fmt.Errorf("%w: proxies %s did not acknowledge epoch %d within %v: the queue stays held; --resume waits again, --abort releases it",
				ErrMove, strings.Join(pending, ", "), epoch, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// jobCore are the suffixes of job-core keys under emq:{q}: (job-core.md).
var jobCore = []string{"pending", "delayed", "active", "done", "dead", "paused"}

// copy copies every key of the queue from src to dst (DUMP, PTTL; RESTORE
// REPLACE with the remaining TTL; pipelined) and verifies each on dst.
func (m *Mover) copy(ctx context.Context, src, dst *Node, rep *Report) error {
	keys, err := scanQueue(ctx, src, m.Queue, 0)
	if err != nil {
		return fmt.Errorf("%w: scanning %s: %v", ErrMove, src.Name, err)
	}
	const chunk = 512
	for lo := 0; lo < len(keys); lo += chunk {
		part := keys[lo:min(lo+chunk, len(keys))]
		cmds := make(valkey.Commands, 0, 2*len(part))
		for _, k := range part {
			cmds = append(cmds, src.C.B().Dump().Key(k).Build(), src.C.B().Pttl().Key(k).Build())
		}
		res := src.C.DoMulti(ctx, cmds...)
		payloads := make([]string, len(part))
		rcmds := make(valkey.Commands, 0, len(part))
		for i, k := range part {
			p, err := res[2*i].ToString()
			if err != nil {
				return fmt.Errorf("%w: DUMP %s on %s: %v", ErrMove, k, src.Name, err)
			}
			ttl, err := res[2*i+1].AsInt64()
			if err != nil {
				return fmt.Errorf("%w: PTTL %s on %s: %v", ErrMove, k, src.Name, err)
			}
			payloads[i] = p
			rcmds = append(rcmds, dst.C.B().Restore().Key(k).Ttl(max(ttl, 0)).SerializedValue(p).Replace().Build())
		}
		for i, r := range dst.C.DoMulti(ctx, rcmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("%w: RESTORE %s on %s: %v", ErrMove, part[i], dst.Name, err)
			}
		}
		vcmds := make(valkey.Commands, len(part))
		for i, k := range part {
			vcmds[i] = dst.C.B().Dump().Key(k).Build()
		}
		for i, r := range dst.C.DoMulti(ctx, vcmds...) {
			p, err := r.ToString()
			if err != nil {
				return fmt.Errorf("%w: verifying %s on %s: %v", ErrMove, part[i], dst.Name, err)
			}
			if !bytes.Equal([]byte(p), []byte(payloads[i])) {
				return fmt.Errorf("%w: verifying %s on %s: its value differs from the source's", ErrMove, part[i], dst.Name)
			}
		}
	}
	m.say("copied and verified %d keys of %s from %s to %s", len(keys), m.Queue, src.Name, dst.Name)
	return m.countKeys(ctx, src, keys, rep)
}

// copyReport fills the report's counts from the source's keys (a resumed
// move whose copy was done).
func (m *Mover) copyReport(ctx context.Context, src *Node, rep *Report) error {
	keys, err := scanQueue(ctx, src, m.Queue, 0)
	if err != nil {
		return fmt.Errorf("%w: scanning %s: %v", ErrMove, src.Name, err)
	}
	return m.countKeys(ctx, src, keys, rep)
}

// countKeys counts the keys, the job rows by state, and lists the keys that
// are not job-core keys.
func (m *Mover) countKeys(ctx context.Context, src *Node, keys []string, rep *Report) error {
	rep.Keys = len(keys)
	rep.Jobs = map[string]int64{}
	prefix := "emq:{" + m.Queue + "}:"
	var rows []string
	for _, k := range keys {
		suf := strings.TrimPrefix(k, prefix)
		switch {
		case strings.HasPrefix(suf, "job:"):
			rows = append(rows, k)
		case slices.Contains(jobCore, suf):
		default:
			rep.Other = append(rep.Other, k)
		}
	}
	slices.Sort(rep.Other)
	for lo := 0; lo < len(rows); lo += 1024 {
		part := rows[lo:min(lo+1024, len(rows))]
		cmds := make(valkey.Commands, len(part))
		for i, k := range part {
			cmds[i] = src.C.B().Hget().Key(k).Field("state").Build()
		}
		for _, r := range src.C.DoMulti(ctx, cmds...) {
			st, err := r.ToString()
			if err != nil {
				st = "unknown"
			}
			rep.Jobs[st]++
		}
	}
	return nil
}

// flip gives the queue to the target at a new epoch: recorded as flipping
// on the source, written on the target, then on the source.
func (m *Mover) flip(ctx context.Context, src, dst *Node, rec *record, rep *Report) error {
	ep := m.maxEpoch(ctx) + 1
	e := Entry{Epoch: ep, State: Owned, Owner: rec.to}.String()
	c := src.C
	if err := c.Do(ctx, c.B().Hset().Key(MoveKey(m.Queue)).FieldValue().FieldValue("step", StepFlipping).Build()).Error(); err != nil {
		return fmt.Errorf("%w: recording the flip on %s: %v", ErrMove, src.Name, err)
	}
	rec.step = StepFlipping
	if err := m.stop(StepFlipping); err != nil {
		return err
	}
	for _, n := range []*Node{dst, src} {
		c := n.C
		if err := multi(ctx, c, c.B().Hset().Key(KeyQueues).FieldValue().FieldValue(m.Queue, e).Build(),
			c.B().Set().Key(KeyEpoch).Value(strconv.FormatInt(ep, 10)).Build()); err != nil {
			return fmt.Errorf("%w: flipping on %s: %v (the flip must be completed: --resume)", ErrMove, n.Name, err)
		}
	}
	rep.FlipEpoch = ep
	m.say("flipped %s to %s at epoch %d", m.Queue, rec.to, ep)
	return nil
}

// Abort rolls back a move that has not begun its flip: the queue is
// released on the source at a new epoch and the keys copied to the target
// are deleted (unless the move replaced keys the target had).
func (m *Mover) Abort(ctx context.Context) error {
	rec, err := m.findRecord(ctx)
	if err != nil {
		return err
	}
	if rec == nil {
		// A hold without a record cannot be made by the mover; release it anyway.
		owner, e, err := Owner(ctx, m.Nodes, m.FileRoute, m.Queue)
		if err != nil {
			return err
		}
		if e == nil || e.State != Held {
			return fmt.Errorf("%w: queue %s has no move in progress", ErrMove, m.Queue)
		}
		rec = &record{from: owner}
	}
	if rec.step == StepFlipping {
		return fmt.Errorf("%w: the move of %s to %s began its flip: complete it with --resume (then move it back if needed)", ErrMove, m.Queue, rec.to)
	}
	src := m.Nodes[rec.from]
	if src == nil {
		return fmt.Errorf("%w: the move of %s names source %q, not an upstream of the configuration", ErrMove, m.Queue, rec.from)
	}
	if dst := m.Nodes[rec.to]; dst != nil && !rec.replace {
		keys, err := scanQueue(ctx, dst, m.Queue, 0)
		if err == nil {
			err = unlink(ctx, dst, keys)
		}
		if err != nil {
			return fmt.Errorf("%w: deleting the copied keys on %s: %v (the queue stays held; run --abort again)", ErrMove, dst.Name, err)
		}
		m.say("deleted %d copied keys of %s on %s", len(keys), m.Queue, dst.Name)
	}
	ep := m.maxEpoch(ctx) + 1
	c := src.C
	if err := multi(ctx, c,
		c.B().Hset().Key(KeyQueues).FieldValue().FieldValue(m.Queue, Entry{Epoch: ep, State: Owned, Owner: rec.from}.String()).Build(),
		c.B().Set().Key(KeyEpoch).Value(strconv.FormatInt(ep, 10)).Build(),
		c.B().Del().Key(MoveKey(m.Queue)).Build()); err != nil {
		return fmt.Errorf("%w: releasing %s on %s: %v", ErrMove, m.Queue, src.Name, err)
	}
	m.say("aborted: %s released on %s at epoch %d", m.Queue, rec.from, ep)
	return nil
}

// multi runs cmds in one MULTI/EXEC.
func multi(ctx context.Context, c valkey.Client, cmds ...valkey.Completed) error {
	all := append(valkey.Commands{c.B().Multi().Build()}, cmds...)
	all = append(all, c.B().Exec().Build())
	for _, r := range c.DoMulti(ctx, all...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// scanQueue returns the keys under the queue's hashtag on n (at most limit
// when limit > 0).
func scanQueue(ctx context.Context, n *Node, queue string, limit int) ([]string, error) {
	pattern := "emq:{" + rewrite.GlobEscape(queue) + "}:*"
	var out []string
	var cursor uint64
	for {
		e, err := n.C.Do(ctx, n.C.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		out = append(out, e.Elements...)
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// unlink deletes keys on n, pipelined.
func unlink(ctx context.Context, n *Node, keys []string) error {
	for lo := 0; lo < len(keys); lo += 512 {
		part := keys[lo:min(lo+512, len(keys))]
		if err := n.C.Do(ctx, n.C.B().Unlink().Key(part...).Build()).Error(); err != nil {
			return err
		}
	}
	return nil
}
