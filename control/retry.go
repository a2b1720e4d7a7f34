package control

import (
	"context"
	"errors"
	"time"
)

// DefaultDeadline is how long `queue move` goes on resuming a move that
// stopped on a fault it can wait out (the command line's --deadline).
const DefaultDeadline = 10 * time.Minute

// MayResume reports whether a move that stopped with err can be taken up
// again without a person deciding anything: by this mover's Resume when
// it wrote or took over the move's record (Recorded) and the record is
// still that one (no --abort dropped it, no other --resume took it over:
// ErrSuperseded); by Run again when it stopped before it wrote a record
// because an upstream was unreachable (ErrUnreachable: a node restarting
// or failing over; the caller dials it again first). Never when the
// mover was stopped on purpose (ErrStopped, a cancelled context). A
// record that cannot be read now (an upstream away) counts as resumable:
// the next Resume reads it again and refuses while it cannot.
//
// What it covers is every stop whose message ends in "--resume tries
// again" or "try again when it is back": the replicas did not confirm a
// write (a replica down or resyncing, a failover), a proxy did not
// acknowledge a hold in --wait, a hold released at --max-hold, a lost
// connection to a node, an upstream down when the move began. A move
// refused for what it found (a target with keys of the queue, a queue
// already served by the target, a move of another mover in progress) is
// not.
func (m *Mover) MayResume(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrSuperseded) || errors.Is(err, ErrStopped) {
		return false
	}
	if m.token == "" {
		return errors.Is(err, ErrUnreachable)
	}
	rec, rerr := m.findRecord(ctx)
	if rerr != nil {
		return true
	}
	return rec != nil && rec.token == m.token
}

// Recorded reports whether this mover wrote or took over the move's
// record: its next attempt is a Resume, not a Run.
func (m *Mover) Recorded() bool { return m.token != "" }

// Answering reports whether every upstream of the move answers now: none
// is left undialled (Down) and each answers a PING within its reply
// timeout. A move stopped because an upstream was unreachable
// (ErrUnreachable) may go on once it does.
func (m *Mover) Answering(ctx context.Context) bool {
	if len(m.Down) > 0 {
		return false
	}
	for _, n := range m.Nodes {
		_, rto := n.Opts.Timeouts()
		pctx, cancel := context.WithTimeout(ctx, rto)
		err := n.C.Do(pctx, n.C.B().Ping().Build()).Error()
		cancel()
		if err != nil {
			return false
		}
	}
	return true
}
