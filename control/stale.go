package control

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
// source at the record's epoch. Anything else (the queue owned by another
// node, or by the target: flipped, held by another move, given back to
// the source) means the record outlived its move. The target must be
// reachable: without its table a flip cannot be told from a move in
// progress.
func (m *Mover) stale(ctx context.Context, rec *record) (bool, *Entry, error) {
	if m.Nodes[rec.to] == nil {
		return false, nil, fmt.Errorf("%w: the target %s of the move of %s is unreachable: whether the move was flipped cannot be told; try again when it is back", ErrMove, rec.to, m.Queue)
	}
	owner, e, err := m.owner(ctx)
	if err != nil {
		return false, nil, err
	}
	if e == nil {
		e = &Entry{State: Owned, Owner: owner}
	}
	switch {
	case rec.step == StepCopying:
		return e.State != Owned || e.Owner != rec.from, e, nil
	case e.State == Held:
		return e.Owner != rec.from || e.Epoch != rec.epoch, e, nil
	case rec.step == StepHeld:
		return e.Owner != rec.from || e.Epoch > rec.epoch, e, nil
	default:
		// Copied or flipping, and not held: flipped already (owned by
		// the target), or superseded. Flipping again would give the
		// queue to the target at an epoch above the live entry.
		return true, e, nil
	}
}

// dropStale removes a stale record from every node that holds it and
// returns the error that tells the operator the move was already done.
func (m *Mover) dropStale(ctx context.Context, rec *record, e *Entry) error {
	for _, name := range slices.Sorted(maps.Keys(m.Nodes)) {
		n := m.Nodes[name]
		r, err := readRecord(ctx, n, m.Queue)
		if err != nil || r == nil {
			continue
		}
		if err := multi(ctx, n.C, deleteRecordCmds(n.C, m.Queue)...); err != nil {
			return fmt.Errorf("%w: removing the stale record of the move of %s on %s: %v", ErrMove, m.Queue, name, err)
		}
	}
	if src := m.Nodes[rec.from]; src != nil {
		if _, err := releaseNotify(ctx, src, m.Queue); err != nil {
			return fmt.Errorf("%w: removed the stale record of the move of %s, but %v", ErrMove, m.Queue, err)
		}
	}
	m.say("the move of %s from %s to %s is over: the queue is %s %s at epoch %d (the record: step %s, epoch %d); removed its stale record", m.Queue, rec.from, rec.to, e.State, e.Owner, e.Epoch, rec.step, rec.epoch)
	return fmt.Errorf("%w: the move of %s from %s to %s is over, already flipped or superseded (the queue is %s %s at epoch %d): its stale record (step %s) is removed, nothing was resumed or rolled back",
		ErrMove, m.Queue, rec.from, rec.to, e.State, e.Owner, e.Epoch, rec.step)
}
