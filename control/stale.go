package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"
)

// A move's record can outlive the move: its deletion, the move's last
// write on the source, goes to a primary that a failover may then discard
// (the mover confirms its copy and its flip on the replicas, not the
// deletion of its record), and the promoted node holds the
// record again. The queue is served by the target meanwhile, at the
// flip's epoch. Resuming or aborting such a record would act on a move
// that is over: an abort deletes the target's keys, the live queue, and
// releases the queue to the source's old copy. A stale record on one
// node can also shadow the record of a newer move on another (the records
// are looked for node by node). So both first ask the merged table: a
// record the table contradicts belongs to a move that is over (see
// stale), and it is only removed.
//
// That holds at every step. A record at step copied or flipping only
// flips again when resumed, which looked safe; but the queue may have
// moved on since (the next mover did not reach the node holding the
// record, and went ahead): flipping it back to the record's target, at an
// epoch above the live entry, gives the queue to a node whose copy is
// old or deleted, and --delete-source then deletes the live keys.

// stale reports whether rec is the record of a move that is over, with
// the merged entry that says so. A move in progress is at step copying
// while its source owns the queue; at step held while the queue is held
// by its source at the record's epoch (or owned by its source at no later
// epoch); at step copied or flipping while the queue is held by its
// source at the record's epoch; at step flipping while the queue is
// owned by its target at the flip's epoch the record names (flippedAt:
// flipped, the source's keys or the record not yet deleted), unless
// another node holds a move record of the queue. Anything else (the queue owned by another
// node, or by the target: flipped, held by another move, given back to
// the source) means the record outlived its move. The target must be
// reachable: without its table a flip cannot be told from a move in
// progress.
func (m *Mover) stale(ctx context.Context, rec *record) (bool, *table.Entry, error) {
	if m.Nodes[rec.to] == nil {
		return false, nil, fmt.Errorf("%w: the target %s of the move of %s is %w: whether the move was flipped cannot be told; try again when it is back", table.ErrMove, rec.to, m.Queue, ErrUnreachable)
	}
	owner, e, err := m.owner(ctx)
	if err != nil {
		return false, nil, err
	}
	if e == nil {
		e = &table.Entry{State: table.Owned, Owner: owner}
	}
	switch {
	case rec.step == StepCopying:
		return e.State != table.Owned || e.Owner != rec.from, e, nil
	case e.State == table.Held:
		return e.Owner != rec.from || e.Epoch != rec.epoch, e, nil
	case rec.step == StepHeld:
		return e.Owner != rec.from || e.Epoch > rec.epoch, e, nil
	case rec.flippedAt(e):
		// This move's own flip, and nothing since: the move is not
		// over until its source's keys and its record are gone
		// (completeFlip), unless another move of the queue began.
		other, err := m.recordElsewhere(ctx, rec.from)
		return other, e, err
	default:
		// Copied or flipping, and not held: flipped already (owned by
		// the target), or superseded. Flipping again would give the
		// queue to the target at an epoch above the live entry.
		return true, e, nil
	}
}

// flippedAt reports whether e, the queue's merged entry, is the flip rec
// recorded: owned by its target at its flip's epoch. A flip's epoch is
// above every entry of the queue when it is chosen, so no other move
// wrote that entry.
func (rec *record) flippedAt(e *table.Entry) bool {
	return rec.step == StepFlipping && rec.flipEpoch > 0 &&
		e.State == table.Owned && e.Owner == rec.to && e.Epoch == rec.flipEpoch
}

// recordElsewhere reports whether a node other than from holds a move
// record of the queue: a move that began after a flip (the queue owned by
// the flip's target) has its record there.
func (m *Mover) recordElsewhere(ctx context.Context, from string) (bool, error) {
	r, err := m.firstRecord(ctx, from)
	return r != nil, err
}

// completeFlip completes a move whose flip is done (flippedAt): a mover
// killed or stopped after its flip, or whose deletion of the source's
// keys failed. The flip is written on the source too if only the target
// has it (settleEntry), then finish runs as the mover would have: the
// source's keys deleted when the move asked for it, the record removed.
// The move is taken over first, so a mover of it still running stops at
// its next write.
func (m *Mover) completeFlip(ctx context.Context, rec *record, e *table.Entry) (*Report, error) {
	src := m.Nodes[rec.from]
	if err := m.takeOver(ctx, src, rec, "resume"); err != nil {
		return nil, err
	}
	m.To = rec.to
	m.say("the move of %s from %s to %s was flipped at epoch %d: completing it", m.Queue, rec.from, rec.to, rec.flipEpoch)
	if err := settleEntry(ctx, src, m.Queue, *e); err != nil {
		return nil, fmt.Errorf("%w: the move of %s was flipped at epoch %d, but writing that on %s failed: %v (--resume tries again)",
			table.ErrMove, m.Queue, rec.flipEpoch, src.Name, err)
	}
	rep := &Report{Queue: m.Queue, From: rec.from, To: rec.to, HoldCopy: rec.holdCopy, HoldEpoch: rec.epoch, FlipEpoch: rec.flipEpoch,
		Keys: int(rec.keys), Rows: rec.rows, Other: rec.other, Held: time.Since(time.UnixMilli(rec.held))}
	return rep, m.finish(ctx, src, rec, rep)
}

// dropStale removes a stale record from every node that holds it and
// returns the error that tells the operator the move was already done.
//
// First, when another node's entry says who owns the queue, that entry
// is written on the record's source too (settleEntry). The source may
// still hold the queue at the move's hold epoch: a flip writes the target
// first, then the source, and a failover of the source can discard the
// second write. Only the target's entry outranks that hold; with the
// record gone, whoever reads the tables without the target's (a proxy
// that cannot reach it, a mover before reachable) would find the queue
// held on the source with no move record, and an abort would give it
// back to the source's copy of before the flip.
func (m *Mover) dropStale(ctx context.Context, rec *record, e *table.Entry) error {
	if src := m.Nodes[rec.from]; src != nil && e.State == table.Owned && e.Epoch > 0 {
		if err := settleEntry(ctx, src, m.Queue, *e); err != nil {
			return fmt.Errorf("%w: the move of %s from %s to %s is over (the queue is %s %s at epoch %d), but writing that on %s failed: %v (the record stays: run --resume or --abort again)",
				table.ErrMove, m.Queue, rec.from, rec.to, e.State, e.Owner, e.Epoch, src.Name, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.Nodes)) {
		n := m.Nodes[name]
		r, err := readRecord(ctx, n, m.Queue)
		if err != nil || r == nil {
			continue
		}
		// Removed only as read: a record written meanwhile (a new move)
		// is not this stale one. A mover of the stale record that is
		// still running finds its record gone at its next write.
		err = m.fenced(ctx, n, own(r, r.step), nil, func() valkey.Commands { return deleteRecordCmds(n.C, m.Queue) })
		if err != nil {
			return fmt.Errorf("%w: removing the stale record of the move of %s on %s: %v", table.ErrMove, m.Queue, name, err)
		}
	}
	if src := m.Nodes[rec.from]; src != nil {
		if _, err := tail.ReleaseNotify(ctx, src, m.Queue); err != nil {
			return fmt.Errorf("%w: removed the stale record of the move of %s, but %v", table.ErrMove, m.Queue, err)
		}
	}
	m.say("the move of %s from %s to %s is over: the queue is %s %s at epoch %d (the record: step %s, epoch %d); removed its stale record", m.Queue, rec.from, rec.to, e.State, e.Owner, e.Epoch, rec.step, rec.epoch)
	return overError{fmt.Errorf("%w: the move of %s from %s to %s is over, already flipped or superseded (the queue is %s %s at epoch %d): its stale record (step %s) is removed, nothing was resumed or rolled back",
		table.ErrMove, m.Queue, rec.from, rec.to, e.State, e.Owner, e.Epoch, rec.step)}
}

// ErrOver is wrapped when a resume or an abort found the move over
// (flipped or superseded) and removed its stale record: there is nothing
// to resume or roll back, and running it again changes nothing.
var ErrOver = errors.New("the move is over")

// overError marks dropStale's error as ErrOver, its message unchanged.
type overError struct{ error }

func (e overError) Is(target error) bool { return target == ErrOver }
func (e overError) Unwrap() error        { return e.error }

// settleEntry writes the queue's entry e on n, raising n's epoch to e's,
// unless n's own entry of the queue is at e's epoch or later; then
// confirms it on n's replicas. It never outranks anything: e is already
// the merged table's entry, at its own epoch. The node's epoch and table
// are watched, so a mover that changes them meanwhile is never undone.
func settleEntry(ctx context.Context, n *table.Node, queue string, e table.Entry) error {
	err := n.C.Dedicated(func(dc valkey.DedicatedClient) error {
		for range 5 {
			if err := dc.Do(ctx, dc.B().Watch().Key(table.KeyEpoch, table.KeyQueues).Build()).Error(); err != nil {
				return err
			}
			rs := dc.DoMulti(ctx, dc.B().Hget().Key(table.KeyQueues).Field(queue).Build(), dc.B().Get().Key(table.KeyEpoch).Build())
			for _, r := range rs {
				if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
					return err
				}
			}
			if s, err := rs[0].ToString(); err == nil {
				if cur, err := table.ParseEntry(s); err == nil && cur.Epoch >= e.Epoch {
					return dc.Do(ctx, dc.B().Unwatch().Build()).Error()
				}
			}
			var top int64
			if s, err := rs[1].ToString(); err == nil {
				top, _ = strconv.ParseInt(s, 10, 64)
			}
			cmds := valkey.Commands{dc.B().Multi().Build(),
				dc.B().Hset().Key(table.KeyQueues).FieldValue().FieldValue(queue, e.String()).Build()}
			if e.Epoch > top {
				cmds = append(cmds, dc.B().Set().Key(table.KeyEpoch).Value(strconv.FormatInt(e.Epoch, 10)).Build())
			}
			rs = dc.DoMulti(ctx, append(cmds, dc.B().Exec().Build())...)
			for _, r := range rs[:len(rs)-1] {
				if err := r.Error(); err != nil {
					return err
				}
			}
			if err := rs[len(rs)-1].Error(); valkey.IsValkeyNil(err) {
				continue // the table changed meanwhile: read it again
			} else if err != nil {
				return err
			}
			return nil
		}
		return fmt.Errorf("the control table of %s kept changing", n.Name)
	})
	if err != nil {
		return err
	}
	return n.Confirm(ctx)
}
