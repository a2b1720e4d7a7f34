package control

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// A move's record can outlive the move: its deletion, the move's last
// write on the source, goes to a primary that a failover may then discard
// (the mover does not wait for replicas), and the promoted node holds the
// record again. The queue is served by the target meanwhile, at the
// flip's epoch. Resuming or aborting such a record would act on a move
// that is over: an abort deletes the target's keys, the live queue, and
// releases the queue to the source's old copy. A stale record on one
// node can also shadow the record of a newer move on another (the records
// are looked for node by node). So both first ask the merged table: a
// record the table contradicts belongs to a move that is over (see
// stale), and it is only removed.

// stale reports whether rec is the record of a move that is over, with
// the merged entry that says so. A move in progress is at step copying
// while its source owns the queue, and at a later step while the queue is
// held by its source at the record's epoch (or, from step copied on,
// owned by its target past that epoch: flipped). Anything else (the queue
// owned by another node, held by another move) means the record outlived
// its move. The target must be reachable: without its table a flip cannot
// be told from a move in progress.
func (m *Mover) stale(ctx context.Context, rec *record) (bool, *Entry, error) {
	if m.Nodes[rec.to] == nil {
		return false, nil, fmt.Errorf("%w: the target %s of the move of %s is unreachable: whether the move was flipped cannot be told; try again when it is back", ErrMove, rec.to, m.Queue)
	}
	owner, e, err := Owner(ctx, m.Nodes, m.FileRoute, m.Queue)
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
	default:
		return e.Owner != rec.from || e.Epoch > rec.epoch, e, nil
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
