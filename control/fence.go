package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// The fence. A mover can stall anywhere (a process stopped, a host
// paused, a packet delayed) and go on later as if nothing happened. In the
// meantime an operator may have aborted its move, or resumed it with
// another mover, and clients may have written to the queue's owner again.
// A step written without looking would then flip the queue to a stale copy
// and delete the live keys. So every write of a move after its first is
// conditional, in the same MULTI/EXEC on the node written, on the move
// still being the mover's:
//
//   - The record ({emqproxy}:move:<queue>, on the source) carries a token,
//     a random id written by whoever created or last took over the record
//     (a new move, --resume, --abort), and who that was ("by"). Each write
//     on the source WATCHes the record, checks the token and the step the
//     mover expects, then runs MULTI/EXEC: a record changed in between
//     fails the EXEC, and the check is made again on the new record.
//   - Each entry written (a hold, a release, a flip) must be newer than the
//     queue's entry already on the node written (the table is WATCHed too):
//     an entry is never overwritten by an older one, nor by another one at
//     its epoch (the same entry again changes nothing: a resumed flip and
//     a stalled one at one epoch write the same entry, and the stalled
//     one's next write, on the source, fails on the record). This is
//     the fence of the flip's write on the target, which holds no record:
//     it follows a conditional write of step flipping on the source, and
//     a mover that took over since then flips at the same epoch or a later
//     one, which the stalled mover's write no longer passes.
//   - --resume and --abort take over a move only by writing a new token
//     (takeOver), conditional on the record they decided on (token and
//     step): the stalled mover's next write fails, and it stops, saying
//     by whom it was superseded.
//
// The fence uses only WATCH and MULTI/EXEC, which every node of the
// project serves (no script, nothing of the job-core module).

// Fields of the record written by the fence.
const (
	fieldToken = "token" // the current mover's random id
	fieldBy    = "by"    // what wrote it: "move", "resume" or "abort", host and pid
)

// ErrSuperseded is wrapped (with ErrMove) when a mover finds that its move
// is no longer its own: the record was taken over (--resume, --abort),
// removed, or the queue's entry on a node is already newer than the one it
// was about to write. The mover stops without writing anything more.
var ErrSuperseded = errors.New("superseded")

// supersededError says by what a mover was superseded.
type supersededError struct{ queue, node, why string }

func (e *supersededError) Error() string {
	return fmt.Sprintf("%v: %v: the move of %s was superseded on %s: %s; this mover stops here and writes nothing more",
		table.ErrMove, ErrSuperseded, e.queue, e.node, e.why)
}

func (e *supersededError) Is(target error) bool {
	return target == table.ErrMove || target == ErrSuperseded
}

// newToken is a record's token: 96 random bits.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// moverID names a mover in its record (fieldBy), for the messages of the
// movers it supersedes.
func moverID(action string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s (%s pid %d)", action, host, os.Getpid())
}

// fence is what a conditional write requires of the move's record on the
// node written.
type fence struct {
	absent bool     // no record at all (a move's first write)
	token  string   // else the record's token
	steps  []string // and its step, one of these (none: any)
}

// own is the fence of the mover's record at one of steps.
func own(rec *record, steps ...string) *fence { return &fence{token: rec.token, steps: steps} }

// check returns why the record cur (its fields; empty: none) is not the
// one f requires ("" when it is).
func (f *fence) check(cur map[string]string) string {
	by := cur[fieldBy]
	if by == "" {
		by = "a mover"
	}
	switch {
	case f.absent && len(cur) == 0:
		return ""
	case f.absent:
		return fmt.Sprintf("the queue has a move record already (%s -> %s, step %s, by %s)", cur["from"], cur["to"], cur["step"], by)
	case len(cur) == 0:
		return "its record is gone: the move was aborted (--abort), or ended by another mover"
	case cur[fieldToken] != f.token:
		return fmt.Sprintf("its record was taken over by %s (now at step %s)", by, cur["step"])
	case len(f.steps) > 0 && !slices.Contains(f.steps, cur["step"]):
		return fmt.Sprintf("its record is at step %s, where this mover expected %v", cur["step"], f.steps)
	}
	return ""
}

// fenced runs the commands of build on n in one MULTI/EXEC, under WATCH,
// once it checked on the same connection that the queue's move record on
// n is what f requires (f nil: no record is looked at) and that the
// queue's entry on n is older than e, or e itself (e nil: no entry is
// written). With e, the transaction writes e first and raises n's epoch to
// e's when it is below (never lowers it: another queue's move may have
// raised it since e was chosen). A failed check is a *supersededError; an EXEC cancelled by
// a change of the watched keys checks again (another queue's entry written
// on n meanwhile is not a reason to stop). build is called for each try:
// a command is sent once.
func (m *Mover) fenced(ctx context.Context, n *table.Node, f *fence, e *table.Entry, build func() valkey.Commands) error {
	return n.C.Dedicated(func(dc valkey.DedicatedClient) error {
		for range 20 {
			var keys []string
			if f != nil {
				keys = append(keys, table.MoveKey(m.Queue))
			}
			if e != nil {
				keys = append(keys, table.KeyQueues, table.KeyEpoch)
			}
			if len(keys) > 0 {
				if err := dc.Do(ctx, dc.B().Watch().Key(keys...).Build()).Error(); err != nil {
					return err
				}
			}
			refuse := func(why string) error {
				_ = dc.Do(ctx, dc.B().Unwatch().Build()).Error()
				return &supersededError{queue: m.Queue, node: n.Name, why: why}
			}
			if f != nil {
				cur, err := dc.Do(ctx, dc.B().Hgetall().Key(table.MoveKey(m.Queue)).Build()).AsStrMap()
				if err != nil {
					return err
				}
				if why := f.check(cur); why != "" {
					return refuse(why)
				}
			}
			var top int64
			if e != nil {
				rs := dc.DoMulti(ctx, dc.B().Hget().Key(table.KeyQueues).Field(m.Queue).Build(), dc.B().Get().Key(table.KeyEpoch).Build())
				for _, r := range rs {
					if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
						return err
					}
				}
				if s, err := rs[0].ToString(); err == nil {
					if cur, err := table.ParseEntry(s); err == nil && (cur.Epoch > e.Epoch || cur.Epoch == e.Epoch && cur != *e) {
						return refuse(fmt.Sprintf("the entry of %s there is %q, not older than the one this mover was writing (%q): another mover wrote it",
							m.Queue, cur.String(), e.String()))
					}
				}
				if s, err := rs[1].ToString(); err == nil {
					top, _ = strconv.ParseInt(s, 10, 64)
				}
			}
			all := valkey.Commands{dc.B().Multi().Build()}
			if e != nil {
				all = append(all, dc.B().Hset().Key(table.KeyQueues).FieldValue().FieldValue(m.Queue, e.String()).Build())
				if e.Epoch > top {
					all = append(all, dc.B().Set().Key(table.KeyEpoch).Value(strconv.FormatInt(e.Epoch, 10)).Build())
				}
			}
			all = append(all, build()...)
			all = append(all, dc.B().Exec().Build())
			rs := dc.DoMulti(ctx, all...)
			for _, r := range rs[:len(rs)-1] {
				if err := r.Error(); err != nil {
					return err
				}
			}
			if err := table.ExecError(rs[len(rs)-1]); !valkey.IsValkeyNil(err) {
				return err
			}
			// A watched key changed: check again.
		}
		return fmt.Errorf("the move record or the control table of %s kept changing under WATCH", n.Name)
	})
}

// stepErr is the error of a step's write: a superseded mover's as it is
// (it says by what), any other wrapped in ErrMove with what was written.
func stepErr(err error, format string, args ...any) error {
	if errors.Is(err, ErrSuperseded) {
		return err
	}
	return fmt.Errorf("%w: %s: %v", table.ErrMove, fmt.Sprintf(format, args...), err)
}

// takeOver makes rec, the record as it was read (token and step), the
// record of this mover: a new token, written only if the record is still
// the one read. From then on, every write of the mover that held it fails
// its fence. --resume and --abort take over a move this way before they
// write anything else. A record changed since it was read (its mover went
// a step further, or another command took it over) is refused: the
// decision was made on a record that is no longer there.
func (m *Mover) takeOver(ctx context.Context, src *table.Node, rec *record, action string) error {
	tok, by := newToken(), moverID(action)
	err := m.fenced(ctx, src, own(rec, rec.step), nil, func() valkey.Commands {
		return valkey.Commands{src.C.B().Hset().Key(table.MoveKey(m.Queue)).FieldValue().
			FieldValue(fieldToken, tok).FieldValue(fieldBy, by).Build()}
	})
	var se *supersededError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: the move of %s changed on %s while it was read (%s): nothing was done; run the command again", table.ErrMove, m.Queue, src.Name, se.why)
	}
	if err != nil {
		return fmt.Errorf("%w: taking over the move of %s on %s: %v", table.ErrMove, m.Queue, src.Name, err)
	}
	rec.token, rec.by = tok, by
	m.token = tok
	return nil
}
