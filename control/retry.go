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
// again by this mover's Resume without a person deciding anything: the
// move's record is still the one this mover wrote or took over last (no
// --abort dropped it, no other --resume took it over: ErrSuperseded), and
// the mover was not stopped on purpose (ErrStopped, a cancelled context).
// A record that cannot be read now (an upstream away) counts as resumable:
// the next Resume reads it again and refuses while it cannot.
//
// What it covers is every stop whose message ends in "--resume tries
// again": the replicas did not confirm a write (a replica down or
// resyncing, a failover), a proxy did not acknowledge a hold in --wait, a
// hold released at --max-hold, a lost connection to a node. A move refused
// before it wrote its record (a target with keys of the queue, a queue
// already served by the target) has no record of this mover's, and is not
// resumable.
func (m *Mover) MayResume(ctx context.Context, err error) bool {
	if err == nil || m.token == "" || ctx.Err() != nil ||
		errors.Is(err, ErrSuperseded) || errors.Is(err, ErrStopped) {
		return false
	}
	rec, rerr := m.findRecord(ctx)
	if rerr != nil {
		return true
	}
	return rec != nil && rec.token == m.token
}
