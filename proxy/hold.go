package proxy

import (
	"time"

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
// commands it queued (whatever round queued them).
//
// Not covered: a command whose keys only COMMAND GETKEYS can find (the
// routing asks the node; the hold check does not).

// admission is a session's hold state: the states it admitted commands
// under in the current round, and scratch space for a command's queues.
type admission struct {
	states []*ctlState
	qs     [][]byte
}

// hold admits, holds or refuses a decided command (see above). It is called
// only with the control table on.
func (s *session) hold(args [][]byte, d *rewrite.Decision) {
	if d.Action != rewrite.Pass && d.Action != rewrite.Rewrite {
		return
	}
	c := s.srv.ctl
	qs := s.commandQueues(args)
	if d.Effect == rewrite.Exec && s.st.InMulti {
		// The queued commands leave now, whatever round queued them.
		qs = append(qs, s.tx.queues...)
	}
	if len(qs) == 0 {
		return
	}
	var began, deadline time.Time
	for {
		st, q, up := s.admit(qs)
		if q == nil {
			s.adm.states = append(s.adm.states, st)
			if !began.IsZero() {
				c.heldNow.Dec()
				c.holdSecs.Observe(time.Since(began).Seconds())
			}
			return
		}
		now := time.Now()
		if began.IsZero() {
			began, deadline = now, now.Add(c.opts.Hold)
			c.heldNow.Inc()
			s.flush() // what this round admitted must not wait with it
			s.release()
		}
		if !now.Before(deadline) {
			c.heldNow.Dec()
			c.holdSecs.Observe(now.Sub(began).Seconds())
			s.refuseHeld(d, q, up)
			return
		}
		t := time.NewTimer(min(deadline.Sub(now), c.opts.Poll/5+time.Millisecond))
		select {
		case <-st.changed:
		case <-t.C:
		case <-s.srv.ctx.Done():
		}
		t.Stop()
	}
}

// admit counts a command for queues qs in flight under the current state
// and returns that state, or, when one of qs may not be sent, returns that
// queue (and the node whose lease lapsed, if that is why) with st the state
// that blocks it.
func (s *session) admit(qs [][]byte) (st *ctlState, q []byte, up *Upstream) {
	c := s.srv.ctl
	for {
		st = c.state.Load()
		if q, up = s.blocked(st, qs); q != nil {
			return st, q, up
		}
		st.inflight.Add(1)
		if c.state.Load() == st {
			return st, nil, nil
		}
		st.inflight.Add(-1) // a new state came in between: admit under it
	}
}

// refuseHeld turns d into the TRYAGAIN refusal of a command for queue q,
// held (up nil) or on a node whose lease lapsed (up).
func (s *session) refuseHeld(d *rewrite.Decision, q []byte, up *Upstream) {
	text := "TRYAGAIN queue " + string(q) + " is moving"
	if up != nil {
		text = "TRYAGAIN queue " + string(q) + " has no lease on upstream " + up.name
	}
	s.refuseWith(d, text, ReasonHeld)
}

// refuseWith turns d into a refusal the proxy decides from its routes or
// the control table (CROSSROUTE, TRYAGAIN), with the error text and
// reason, keeping what the audit record needs; inside MULTI it discards
// the transaction.
func (s *session) refuseWith(d *rewrite.Decision, text string, reason rewrite.Reason) {
	*d = rewrite.Decision{Action: rewrite.Refuse, Reason: reason,
		Reply: []byte("-" + oneLine(text) + "\r\n"), Script: d.Script, SHA: d.SHA, Queue: d.Queue}
	if s.st.InMulti {
		d.Effect = rewrite.AbortMulti
	}
}

// blocked returns the first of qs that may not be sent under st: a held
// queue (up nil), or a queue routed to a node whose lease is not valid
// (up is that node).
func (s *session) blocked(st *ctlState, qs [][]byte) (q []byte, up *Upstream) {
	c := s.srv.ctl
	var now time.Time
	r := s.srv.routes.Load()
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

// release uncounts the commands the session admitted, once their replies
// are in.
func (s *session) release() {
	for i, st := range s.adm.states {
		st.inflight.Add(-1)
		s.adm.states[i] = nil
	}
	s.adm.states = s.adm.states[:0]
}

// commandQueues returns the queues (key hashtags) of a command's keys, as
// routing finds them (route_session.go), without asking the node.
func (s *session) commandQueues(args [][]byte) [][]byte {
	qs := s.adm.qs[:0]
	add := func(k []byte) {
		if q := rewrite.Hashtag(k); q != nil {
			qs = append(qs, q)
		}
	}
	if isScriptCall(args[0]) {
		if len(args) >= 3 {
			if n, ok := rewrite.ParseInt(args[2]); ok && n >= 0 && n <= int64(len(args)-3) {
				for _, k := range args[3 : 3+n] {
					add(k)
				}
			}
		}
	} else if ck := s.srv.keys.lookup(args); ck != nil && !ck.ask {
		s.keyPos = ck.positions(args, s.keyPos[:0])
		for _, i := range s.keyPos {
			add(args[i])
		}
	}
	s.adm.qs = qs
	return qs
}
