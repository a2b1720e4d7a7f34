package proxy

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Holding a command (control.go has the loop and its guarantees).
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
// An admitted command counts in the state it was admitted under until the
// round that sent it has its replies; the control loop waits for that count
// before it acknowledges a new epoch.
//
// A transaction is admitted at EXEC, when it is sent, by the queues of the
// commands it queued (whatever round queued them), and goes where those
// queues route then (route_session.go).
//
// Every session mode is held alike, a bridged RESP3 client included: its
// pushes go on reaching it while its command waits. The keys are those the
// plan found (plan.go); a command whose keys only COMMAND GETKEYS can tell
// is held by them when routes split (the node is asked), and not held with
// a single route.

// admission is a session's hold state: the states it admitted commands
// under in the current round, and scratch space for a command's queues.
type admission struct {
	states []*ctlState
	qs     [][]byte
}

// admitStep admits a planned command under the view's control state
// (plan.go), by the queues of its keys (and, at EXEC, of what the
// transaction queued): counted in flight in that state, or sp.wait with the
// queue that may not be sent. False when the state changed meanwhile: the
// command is planned again under the new one.
func (s *session) admitStep(sp *planStep) bool {
	qs := s.queuesOfKeys(sp.cmdKeys)
	if sp.exec {
		// The queued commands leave now, whatever round queued them.
		qs = s.tx.appendQueues(qs)
		s.adm.qs = qs
	}
	if len(qs) == 0 {
		return true
	}
	st := s.v.ctl
	if q, up := s.blocked(st, qs); q != nil {
		sp.wait, sp.heldQ, sp.heldUp = true, q, up
		return true
	}
	st.inflight.Add(1)
	if s.srv.ctl.state.Load() != st {
		st.inflight.Add(-1) // a new state came in between: admit under it
		return false
	}
	s.adm.states = append(s.adm.states, st)
	return true
}

// refuseHeld turns d into the TRYAGAIN refusal of a command for queue q,
// held (up nil) or on a node whose lease lapsed (up).
func (s *session) refuseHeld(d *rewrite.Decision, q []byte, up *upstream.Upstream) {
	text := "TRYAGAIN queue " + string(q) + " is moving"
	if up != nil {
		text = "TRYAGAIN queue " + string(q) + " has no lease on upstream " + up.Name()
	}
	s.refuseWith(d, text, ReasonHeld)
}

// refuseWith turns d into a refusal the proxy decides from its routes or
// the control table (CROSSROUTE, TRYAGAIN), with the error text and
// reason, keeping what the audit record needs; inside MULTI it discards
// the transaction, and a refused EXEC ends it.
func (s *session) refuseWith(d *rewrite.Decision, text string, reason rewrite.Reason) {
	exec := d.Effect == rewrite.Exec
	*d = rewrite.Decision{Action: rewrite.Refuse, Reason: reason,
		Reply: []byte("-" + resp.OneLine(text) + "\r\n"), Script: d.Script, SHA: d.SHA, Queue: d.Queue}
	switch {
	case exec:
		d.Effect = rewrite.Discard // a refused EXEC ends the transaction, as the server's
	case s.st.InMulti:
		d.Effect = rewrite.AbortMulti
	}
}

// blocked returns the first of qs that may not be sent under st: a held
// queue (up nil), or a queue routed to a node whose lease is not valid
// (up is that node).
func (s *session) blocked(st *ctlState, qs [][]byte) (q []byte, up *upstream.Upstream) {
	c := s.srv.ctl
	var now time.Time
	r := s.v.routes
	for _, q := range qs {
		if st.held[string(q)] {
			return q, nil
		}
		u := r.forQueue(q)
		if now.IsZero() {
			now = time.Now()
		}
		if c.leaseLeft(c.byUp[u], now) <= 0 {
			return q, u
		}
	}
	return nil, nil
}

// leaseLapsed is the error a segment's part for u gets, instead of being
// sent, when the session admitted commands this round and the proxy's
// lease on u has lapsed since: the process was paused (SIGSTOP, a stalled
// VM) between admitting and sending them, long enough that a mover may
// have waited the lease out and moved their queue. nil: send it. Checked
// just before the write; a pause between this check and the write itself
// is not seen (only a fencing epoch on the node would see it).
func (s *session) leaseLapsed(u *upstream.Upstream) []byte {
	c := s.srv.ctl
	if c == nil || len(s.adm.states) == 0 {
		return nil
	}
	n := c.byUp[u]
	if n == nil || c.leaseLeft(n, time.Now()) > 0 {
		return nil
	}
	return []byte("-TRYAGAIN emqproxy's lease on upstream " + u.Name() + " lapsed before the command was sent; nothing was sent\r\n")
}

// beforeSend, when set (by tests), runs before a segment is sent.
var beforeSend func(*session)

// release uncounts the commands the session admitted, once their replies
// are in.
func (s *session) release() {
	for i, st := range s.adm.states {
		st.inflight.Add(-1)
		s.adm.states[i] = nil
	}
	s.adm.states = s.adm.states[:0]
}
