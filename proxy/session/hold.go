package session

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// Holding a command (control.go has the loop and its guarantees; package
// plan's admit.go the admission itself, plan.go's waitHeld the wait).
//
// With the control table on, a forwarded command whose keys name a queue
// (the hashtag of a key) is admitted only when none of its queues is held
// and the proxy's lease on the node each queue routes to is valid.
// Otherwise the command waits: the session first sends what it built so far
// and gets its replies (so nothing it admitted stays in flight while it
// waits), then waits for a new state or a renewal, at most
// ControlOptions.Hold; past that the command gets
// `-TRYAGAIN queue <q> is moving` (or `... has no lease on upstream <u>`)
// and nothing of it is sent. Other queues, and keyless commands, are not
// held.
//
// An admitted command counts in the state it was admitted under, by the
// slots of its queues, until the round that sent it has its replies (before
// they are written to the client); the control loop acknowledges a new
// epoch only once no command of a queue it changed counts under an older
// state. Before every write, and before a resend, the session checks the
// lease and the table in force again (leaseLapsed).
//
// A transaction is admitted at EXEC, when it is sent, by the queues of the
// commands it queued (whatever round queued them), and goes where those
// queues route then (package plan's route.go).
//
// Every session mode is held alike, a bridged RESP3 client included: its
// pushes go on reaching it while its command waits. The keys are those the
// plan found (package plan); a command whose keys only COMMAND GETKEYS can tell
// is held by them when routes split (the node is asked), and not held with
// a single route.

// admission is a session's hold state: the states it admitted commands
// under in the current round, with their queues' slots (the plan's
// Step.Admitted and Step.Slots, noted by plan.go's plan), uncounted once
// the round's replies are in (release).
type admission struct {
	states []admitted
}

// admitted is one command admitted under the control table.
type admitted struct {
	st    *plan.ControlState
	slots plan.Slots
}

// leaseLapsed is the error a segment's part for u gets, instead of being
// sent, when the session admitted commands this round and either
//
//   - the proxy's lease on u has lapsed since: the process was paused
//     (SIGSTOP, a stalled VM) between admitting and sending them, long
//     enough that a mover may have waited the lease out and moved their
//     queue; or
//   - the control state in force is no longer the one a command was
//     admitted under and it changed that command's queue (held, released
//     or re-routed; plan.ControlState.Moved): the command was routed by a
//     table that is no longer the proxy's, and may be bound for the
//     queue's old owner. The control loop installs a new table without
//     waiting for the commands in flight (control.go), so this check, not
//     a wait, keeps such a command from leaving.
//
// nil: send it. Checked just before every write of a part, the first and
// a resend on a new connection alike (segment.go's flush). A pause between
// this check and the write itself is not seen here: a mover closes the
// data connections of a proxy that did not acknowledge its hold before it
// copies the tail (docs/queue-move.md, "Late writers"), and a write on a
// closed connection is resent only after this check passes again.
func (s *session) leaseLapsed(u *upstream.Upstream) []byte {
	c := s.srv.Ctl
	if c == nil || len(s.adm.states) == 0 {
		return nil
	}
	if c.LeaseLapsed(u, time.Now()) {
		return clienterr.Reply(clienterr.New(clienterr.TryAgain, "emqproxy's lease on upstream "+u.Name()+" lapsed before the command was sent; nothing was sent"))
	}
	if s.admittedMoved(c.Current()) {
		return clienterr.Reply(clienterr.New(clienterr.TryAgain, "emqproxy's control table changed for the command's queue before it was sent; nothing was sent"))
	}
	return nil
}

// admittedMoved reports whether cur changed the queue of a command the
// session admitted this round (plan.ControlState.Moved).
func (s *session) admittedMoved(cur *plan.ControlState) bool {
	for i := range s.adm.states {
		if a := &s.adm.states[i]; a.st.Moved(cur, &a.slots) {
			return true
		}
	}
	return false
}

// release uncounts the commands the session admitted, once their replies
// are in.
func (s *session) release() {
	for i := range s.adm.states {
		a := &s.adm.states[i]
		a.st.Release(&a.slots)
		a.st = nil
	}
	s.adm.states = s.adm.states[:0]
}
