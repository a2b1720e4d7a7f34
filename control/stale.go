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
// releases the queue to the source's old copy. So both first ask the
// merged table: a queue owned by the record's target at an epoch past the
// record's has been flipped, and the record is only removed.

// stale reports whether rec is the record of a move whose flip is done,
// with the entry that says so. The target must be reachable: without its
// table the flip cannot be told from a move in progress.
func (m *Mover) stale(ctx context.Context, rec *record) (bool, *Entry, error) {
	if m.Nodes[rec.to] == nil {
		return false, nil, fmt.Errorf("%w: the target %s of the move of %s is unreachable: whether the move was flipped cannot be told; try again when it is back", ErrMove, rec.to, m.Queue)
	}
	_, e, err := Owner(ctx, m.Nodes, m.FileRoute, m.Queue)
	if err != nil {
		return false, nil, err
	}
	return e != nil && e.State == Owned && e.Owner == rec.to && e.Epoch > rec.epoch, e, nil
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
	m.say("the move of %s to %s was done: %s owns it at epoch %d, past the record's %d; removed its stale record", m.Queue, rec.to, e.Owner, e.Epoch, rec.epoch)
	return fmt.Errorf("%w: the move of %s from %s to %s was already flipped (%s owns it at epoch %d): its stale record (step %s) is removed, nothing was resumed or rolled back",
		ErrMove, m.Queue, rec.from, rec.to, e.Owner, e.Epoch, rec.step)
}
