package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// record is a move in progress.
type record struct {
	from, to, step string
	epoch          int64 // the hold's epoch (0 while copying)
	replace        bool
	holdCopy       bool  // the whole copy under the hold
	deleteSource   bool  // --delete-source was asked when the move began
	wiped          bool  // the target's keys of the queue were deleted for the copy: every one left is the move's
	flipEpoch      int64 // the flip's epoch, recorded with step flipping (0 before)
	started        int64 // unix ms of the move's start
	held           int64 // unix ms of the hold
	keys, rows     int64 // counted when the copy was verified
	other          []string
	token, by      string // the fence: the current mover's id, and what it is (fence.go)
}

func (r *record) fields() []string {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{"from", r.from, "to", r.to, "step", r.step, "epoch", i(r.epoch), "replace", b(r.replace),
		"hold_copy", b(r.holdCopy), "delete_source", b(r.deleteSource), "started", i(r.started), "held", i(r.held), fieldToken, r.token, fieldBy, r.by}
}

// readRecord reads the move record of the queue on n (nil: none).
func readRecord(ctx context.Context, n *table.Node, queue string) (*record, error) {
	f, err := n.C.Do(ctx, n.C.B().Hgetall().Key(table.MoveKey(queue)).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", n.Name, err)
	}
	if len(f) == 0 {
		return nil, nil
	}
	r := &record{from: f["from"], to: f["to"], step: f["step"], replace: f["replace"] == "1", holdCopy: f["hold_copy"] == "1",
		deleteSource: f["delete_source"] == "1", wiped: f["wiped"] == "1", token: f[fieldToken], by: f[fieldBy]}
	r.epoch, _ = strconv.ParseInt(f["epoch"], 10, 64)
	r.started, _ = strconv.ParseInt(f["started"], 10, 64)
	r.held, _ = strconv.ParseInt(f["held"], 10, 64)
	r.flipEpoch, _ = strconv.ParseInt(f["flip_epoch"], 10, 64)
	if r.held == 0 && r.step != StepCopying {
		r.held = r.started // a record of an older mover: the move began with its hold
	}
	r.keys, _ = strconv.ParseInt(f["keys"], 10, 64)
	r.rows, _ = strconv.ParseInt(f["rows"], 10, 64)
	if f["other"] != "" {
		r.other = strings.Split(f["other"], "\n")
	}
	return r, nil
}

// recordCmds are the commands that write the whole record (and its index).
func recordCmds(c valkey.Client, queue string, r *record) valkey.Commands {
	hs := c.B().Hset().Key(table.MoveKey(queue)).FieldValue()
	f := r.fields()
	for i := 0; i < len(f); i += 2 {
		hs = hs.FieldValue(f[i], f[i+1])
	}
	return valkey.Commands{hs.Build(), c.B().Hset().Key(table.KeyMoves).FieldValue().FieldValue(queue, strconv.FormatInt(r.started, 10)).Build()}
}

// begin writes the record of a new move at step copying, with a new
// token, in one transaction, unless the queue has one already (two movers
// started at once: the second is refused).
func (m *Mover) begin(ctx context.Context, src *table.Node, rec *record) error {
	rec.step = StepCopying
	rec.token, rec.by = newToken(), moverID("move")
	m.token = rec.token
	err := m.fenced(ctx, src, &fence{absent: true}, nil, func() valkey.Commands { return recordCmds(src.C, m.Queue, rec) })
	var se *supersededError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: queue %s is already moving (a mover began at the same time: %s)", table.ErrMove, m.Queue, se.why)
	}
	if err != nil {
		return fmt.Errorf("%w: recording the move on %s: %v", table.ErrMove, src.Name, err)
	}
	m.say("moving %s from %s to %s: copying while it is served", m.Queue, rec.from, rec.to)
	return nil
}

// setStep records the move's step (and extra fields), conditional on the
// record being the mover's at step from (fenced): a record deleted by
// --abort, or taken over by --resume, from elsewhere stops the mover.
func (m *Mover) setStep(ctx context.Context, src *table.Node, rec *record, from, step string, extra ...string) error {
	if err := m.checkRecord(ctx, src, rec); err != nil {
		return err
	}
	if step == StepCopied {
		// From step copied on, a resume only flips: the copy must be on
		// the target's replicas first, or a failover of the target
		// after the flip would serve the queue without it.
		if dst := m.Nodes[m.To]; dst != nil {
			if err := dst.Confirm(ctx); err != nil {
				return fmt.Errorf("%w: the copy of %s: %v", table.ErrMove, m.Queue, err)
			}
		}
	}
	err := m.fenced(ctx, src, own(rec, from), nil, func() valkey.Commands {
		hs := src.C.B().Hset().Key(table.MoveKey(m.Queue)).FieldValue().FieldValue("step", step)
		for i := 0; i+1 < len(extra); i += 2 {
			hs = hs.FieldValue(extra[i], extra[i+1])
		}
		return valkey.Commands{hs.Build()}
	})
	if err != nil {
		return stepErr(err, "recording step %s on %s", step, src.Name)
	}
	rec.step = step
	return nil
}

// deleteRecordCmds remove the move's record, its index entry and its progress.
func deleteRecordCmds(c valkey.Client, queue string) valkey.Commands {
	return valkey.Commands{c.B().Del().Key(table.MoveKey(queue), keycopy.ProgressKey(queue)).Build(), c.B().Hdel().Key(table.KeyMoves).Field(queue).Build()}
}

// movesOn lists the queues with a move record on n: the index and the
// queues of its table.
func movesOn(ctx context.Context, n *table.Node, t table.Table) []string {
	set := map[string]bool{}
	for q := range t.Queues {
		set[q] = true
	}
	if m, err := n.C.Do(ctx, n.C.B().Hkeys().Key(table.KeyMoves).Build()).AsStrSlice(); err == nil {
		for _, q := range m {
			set[q] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
