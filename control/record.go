package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/rewrite"
)

// KeyMoves is the hash, on a move's source, of the queues with a move
// record (queue -> unix ms of the start): queue status finds moves that
// hold nothing yet (step copying) without scanning.
const KeyMoves = rewrite.ControlKeyPrefix + ":moves"

// keyProgress is the prefix of a move's progress, beside its record (a
// string with a short expiry, rewritten while the mover runs).
const keyProgress = rewrite.ControlKeyPrefix + ":progress:"

// ProgressKey is the key of the progress of the move of queue.
func ProgressKey(queue string) string { return keyProgress + queue }

// record is a move in progress.
type record struct {
	from, to, step string
	epoch          int64 // the hold's epoch (0 while copying)
	replace        bool
	holdCopy       bool  // the whole copy under the hold
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
		"hold_copy", b(r.holdCopy), "started", i(r.started), "held", i(r.held), fieldToken, r.token, fieldBy, r.by}
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
	r := &record{from: f["from"], to: f["to"], step: f["step"], replace: f["replace"] == "1", holdCopy: f["hold_copy"] == "1",
		token: f[fieldToken], by: f[fieldBy]}
	r.epoch, _ = strconv.ParseInt(f["epoch"], 10, 64)
	r.started, _ = strconv.ParseInt(f["started"], 10, 64)
	r.held, _ = strconv.ParseInt(f["held"], 10, 64)
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
	hs := c.B().Hset().Key(MoveKey(queue)).FieldValue()
	f := r.fields()
	for i := 0; i < len(f); i += 2 {
		hs = hs.FieldValue(f[i], f[i+1])
	}
	return valkey.Commands{hs.Build(), c.B().Hset().Key(KeyMoves).FieldValue().FieldValue(queue, strconv.FormatInt(r.started, 10)).Build()}
}

// begin writes the record of a new move at step copying, with a new
// token, in one transaction, unless the queue has one already (two movers
// started at once: the second is refused).
func (m *Mover) begin(ctx context.Context, src *Node, rec *record) error {
	rec.step = StepCopying
	rec.token, rec.by = newToken(), moverID("move")
	m.token = rec.token
	err := m.fenced(ctx, src, &fence{absent: true}, nil, func() valkey.Commands { return recordCmds(src.C, m.Queue, rec) })
	var se *supersededError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: queue %s is already moving (a mover began at the same time: %s)", ErrMove, m.Queue, se.why)
	}
	if err != nil {
		return fmt.Errorf("%w: recording the move on %s: %v", ErrMove, src.Name, err)
	}
	m.say("moving %s from %s to %s: copying while it is served", m.Queue, rec.from, rec.to)
	return nil
}

// setStep records the move's step (and extra fields), conditional on the
// record being the mover's at step from (fenced): a record deleted by
// --abort, or taken over by --resume, from elsewhere stops the mover.
func (m *Mover) setStep(ctx context.Context, src *Node, rec *record, from, step string, extra ...string) error {
	if err := m.checkRecord(ctx, src, rec); err != nil {
		return err
	}
	if step == StepCopied {
		// From step copied on, a resume only flips: the copy must be on
		// the target's replicas first, or a failover of the target
		// after the flip would serve the queue without it.
		if dst := m.Nodes[m.To]; dst != nil {
			if err := dst.Confirm(ctx); err != nil {
				return fmt.Errorf("%w: the copy of %s: %v", ErrMove, m.Queue, err)
			}
		}
	}
	err := m.fenced(ctx, src, own(rec, from), nil, func() valkey.Commands {
		hs := src.C.B().Hset().Key(MoveKey(m.Queue)).FieldValue().FieldValue("step", step)
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
	return valkey.Commands{c.B().Del().Key(MoveKey(queue), ProgressKey(queue)).Build(), c.B().Hdel().Key(KeyMoves).Field(queue).Build()}
}

// Progress is a running move's progress, stored beside its record.
type Progress struct {
	Phase    string  `json:"phase"` // copying, held
	Round    int     `json:"round"`
	Keys     int64   `json:"keys"`    // keys written so far (a key copied again counts again)
	Bytes    int64   `json:"bytes"`   // bytes written so far
	Rate     float64 `json:"rate"`    // keys per second, lately
	ByteRate float64 `json:"brate"`   // bytes per second, lately
	Scanned  float64 `json:"scanned"` // the part of a full round's scan done (0..1)
	Pending  int     `json:"pending"` // changed keys waiting for the next round
	ETA      int64   `json:"eta_ms"`  // the estimated time left in this round, ms (-1: unknown)
	Restarts int     `json:"restarts"`
	Updated  int64   `json:"updated"` // unix ms
}

// String is the progress as one line.
func (p Progress) String() string {
	eta := "unknown"
	if p.ETA >= 0 {
		eta = (time.Duration(p.ETA) * time.Millisecond).Round(100 * time.Millisecond).String()
	}
	s := fmt.Sprintf("%s, round %d: %d keys (%s) copied, %.0f keys/s (%s/s)", p.Phase, p.Round, p.Keys, byteSize(p.Bytes), p.Rate, byteSize(int64(p.ByteRate)))
	if p.Scanned > 0 && p.Scanned < 1 {
		s += fmt.Sprintf(", scanned %.0f%%", 100*p.Scanned)
	}
	s += fmt.Sprintf(", %d changed keys waiting, round time left %s", p.Pending, eta)
	if p.Restarts > 0 {
		s += fmt.Sprintf(", tracking restarted %d times", p.Restarts)
	}
	return s
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// storeProgress writes p beside the record (expiring a minute after the
// last write: a killed mover's progress does not linger).
func storeProgress(ctx context.Context, n *Node, queue string, p Progress) error {
	b, _ := json.Marshal(p)
	return n.C.Do(ctx, n.C.B().Set().Key(ProgressKey(queue)).Value(string(b)).Px(time.Minute).Build()).Error()
}

// readProgress reads a move's progress (nil: none).
func readProgress(ctx context.Context, n *Node, queue string) *Progress {
	s, err := n.C.Do(ctx, n.C.B().Get().Key(ProgressKey(queue)).Build()).ToString()
	if err != nil {
		return nil
	}
	var p Progress
	if json.Unmarshal([]byte(s), &p) != nil {
		return nil
	}
	return &p
}

// movesOn lists the queues with a move record on n: the index and the
// queues of its table.
func movesOn(ctx context.Context, n *Node, t Table) []string {
	set := map[string]bool{}
	for q := range t.Queues {
		set[q] = true
	}
	if m, err := n.C.Do(ctx, n.C.B().Hkeys().Key(KeyMoves).Build()).AsStrSlice(); err == nil {
		for _, q := range m {
			set[q] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
