package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"
)

// ErrNoMove is wrapped when the queue has no move in progress.
var ErrNoMove = errors.New("no move in progress")

// ErrNeedsPerson is wrapped when an abort refuses what it found: a move
// that began its flip (--resume completes it), a record that names an
// upstream the configuration does not have. Running it again changes
// nothing.
var ErrNeedsPerson = errors.New("a person must decide")

// AbortMayRetry reports whether an abort that stopped with err may be run
// again without a person deciding anything: every stop that says "run
// --abort again" or "try again when it is back" (an upstream away or
// failing over, a copy that could not be deleted, a release its replicas
// did not confirm, the record changed under it). Not a refusal
// (ErrNeedsPerson), a queue with no move (ErrNoMove), a move found over
// (ErrOver), or a command stopped on purpose.
func AbortMayRetry(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !errors.Is(err, ErrNoMove) && !errors.Is(err, ErrNeedsPerson) &&
		!errors.Is(err, ErrOver) && !errors.Is(err, ErrStopped)
}

// ConfirmAll confirms, on every upstream, that its replicas have the
// writes made to it so far (table.Node.Confirm): after an abort whose own
// confirmation failed, that the record's removal (and the release of the
// hold, in the same transaction) survives a failover.
func (m *Mover) ConfirmAll(ctx context.Context) error {
	for _, name := range slices.Sorted(maps.Keys(m.Nodes)) {
		if err := m.Nodes[name].Confirm(ctx); err != nil {
			return fmt.Errorf("%w: %s: %v", table.ErrMove, name, err)
		}
	}
	return nil
}

// Abort rolls back a move that has not begun its flip: the keys copied to
// the target are deleted (dropCopy: every key of the queue there once the
// copy began; before, a --replace move keeps the keys the target had, and
// only temporary keys of chunked copies go), a held queue is
// released on the source at a new epoch, the source's keyspace
// notifications get their previous setting back, and the record goes.
//
// The abort first takes the move over (takeOver: a new token in its record,
// only if the record is still the one read, at the step read): a mover of
// it still running, stalled anywhere, fails the fence of its next write
// and stops, saying it was superseded, instead of flipping the queue to
// the copy the abort deletes. The release and the record's removal are
// fenced on the abort's own token.
func (m *Mover) Abort(ctx context.Context) error {
	rec, err := m.findRecord(ctx)
	if err != nil {
		return err
	}
	noRecord := false
	if rec == nil {
		// A hold without a record cannot be made by the mover; release it anyway.
		owner, e, err := m.owner(ctx)
		if err != nil {
			return err
		}
		if e == nil || e.State != table.Held {
			return fmt.Errorf("%w: queue %s has %w", table.ErrMove, m.Queue, ErrNoMove)
		}
		rec = &record{from: owner, step: StepHeld}
		noRecord = true
	} else if done, e, err := m.stale(ctx, rec); err != nil {
		return err
	} else if done {
		return m.dropStale(ctx, rec, e)
	}
	if rec.step == StepFlipping {
		return fmt.Errorf("%w: the move of %s to %s began its flip: complete it with --resume (then move it back if needed) (%w)", table.ErrMove, m.Queue, rec.to, ErrNeedsPerson)
	}
	src := m.Nodes[rec.from]
	if src == nil {
		return fmt.Errorf("%w: the move of %s names source %q, not an upstream of the configuration (%w)", table.ErrMove, m.Queue, rec.from, ErrNeedsPerson)
	}
	// A hold without a record is released only while there is still no
	// record (a mover that began meanwhile is left alone).
	f := &fence{absent: true}
	if !noRecord {
		if err := m.takeOver(ctx, src, rec, "abort"); err != nil {
			return err
		}
		f = own(rec, rec.step)
	}
	if dst := m.Nodes[rec.to]; dst != nil {
		n, err := dropCopy(ctx, dst, m.Queue, rec)
		if err != nil {
			return fmt.Errorf("%w: deleting the copied keys on %s: %v (run --abort again)", table.ErrMove, dst.Name, err)
		}
		m.say("deleted %d copied keys of %s on %s", n, m.Queue, dst.Name)
	}
	c := src.C
	var ep int64
	var e *table.Entry
	if rec.step != StepCopying {
		top, err := m.maxEpoch(ctx)
		if err != nil {
			return err
		}
		ep = top + 1
		e = &table.Entry{Epoch: ep, State: table.Owned, Owner: rec.from}
	}
	if err := m.fenced(ctx, src, f, e, func() valkey.Commands { return deleteRecordCmds(c, m.Queue) }); err != nil {
		var se *supersededError
		if errors.As(err, &se) {
			return fmt.Errorf("%w: the move of %s changed on %s during the abort (%s): run --abort again", table.ErrMove, m.Queue, src.Name, se.why)
		}
		return fmt.Errorf("%w: releasing %s on %s: %v", table.ErrMove, m.Queue, src.Name, err)
	}
	if _, err := tail.ReleaseNotify(ctx, src, m.Queue); err != nil {
		return fmt.Errorf("%w: aborted, but %v", table.ErrMove, err)
	}
	if _, err := tail.RestoreSyncDelay(ctx, src); err != nil {
		return fmt.Errorf("%w: aborted, but %v", table.ErrMove, err)
	}
	// The release and the record's removal are one transaction on the
	// source: lost in a failover, both are, and the promoted node holds
	// the queue again with its record (at the step before). Nothing is
	// undone here; the operator is told to look and abort again.
	if err := src.Confirm(ctx); err != nil {
		return fmt.Errorf("%w: aborted on %s's primary, but %v: a failover of %s before its replicas have it brings the move back "+
			"(its record, and its hold if it had one: queue status shows it): run --abort again then", table.ErrMove, src.Name, err, src.Name)
	}
	if rec.step == StepCopying {
		m.say("aborted: the copy of %s stopped; %s serves it as before", m.Queue, rec.from)
	} else {
		m.say("aborted: %s released on %s at epoch %d", m.Queue, rec.from, ep)
	}
	return nil
}
