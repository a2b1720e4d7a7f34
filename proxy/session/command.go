package session

import (
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/txn"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The one path every command takes, in normal service and on the RESP3
// bridge alike (serveCommand): planned and admitted (admit), then queued in
// a transaction, sent with its EXEC, forwarded, or answered by the proxy,
// and its effect made on the session (apply). What differs between the
// two is only how a command and its reply travel, which a carrier says:
// in normal service the round's segment (inSegment, segment.go: one batch
// per upstream connection, every reply written in command order at the
// round's end); on the bridge the client's own connections (onBridge,
// bridge.go: the legs, whose relay passes the server's replies and
// pushes on in the server's order, and barriers, after which a reply the
// proxy makes keeps its place).

// command is one command on its way through the session: the frame, what the
// plan made of it, and where its reply goes. The session serves one
// command at a time (a bridged one too), in its one field cmd, so that
// the carrier's methods, called through an interface, do not move each
// command to the heap; it is cleared once the command is served.
type command struct {
	f     resp.Frame
	sp    plan.Step
	audit int  // its audit record's index (s.obs), or -1
	drop  bool // its reply is not for the client (CLIENT REPLY OFF or SKIP)
}

// up is the upstream the command routes to (the plan's), or the default
// route's when it forwards nothing.
func (c *command) up(s *session) *upstream.Upstream {
	if c.sp.Up != nil {
		return c.sp.Up
	}
	return s.v.Routes.Default()
}

// A carrier is how a planned command travels (see above): each method is
// one step of serveCommand that the segment and the bridge take their own
// way. Nothing in it decides: the plan did.
type carrier interface {
	// start prepares a command's plan: what only the carrier knows as an
	// input (on the bridge, whether the client may be pushed to).
	start(c *command) error
	// flushHeld sends what was built before a held command waits, so
	// nothing admitted before it stays in flight meanwhile.
	flushHeld() error
	// route takes a planned command before it goes anywhere; done: the
	// carrier served it there (a CLIENT CACHING kept for the next
	// command's connection; on the bridge, HELLO 2 leaving it, or the
	// command's upstream unavailable).
	route(c *command) (done bool, err error)
	// queued places the reply of a command queued in the transaction (o:
	// what the transaction did with it).
	queued(c *command, o txn.Outcome) error
	// exec sends the transaction, MULTI and the queued commands with c,
	// its EXEC, as one unit, and ends it (endMulti).
	exec(c *command) error
	// forward sends a forwarded command, its reply the server's.
	forward(c *command) error
	// answer places the reply the proxy makes (a refusal, a local answer)
	// and sends what goes with it (a verb body's SCRIPT LOAD).
	answer(c *command) error
	// settle ends a command that got past route, given its error: on the
	// bridge, an admitted command stays counted until its reply is in.
	settle(err error) error
}

// serveCommand serves one command on carrier w: the one path (see above).
func (s *session) serveCommand(f resp.Frame, w carrier) error {
	s.listing.LastArgs = f.Args // CLIENT LIST's cmd (clients.View)
	c := &s.cmd
	c.f = f // the rest is zero: cleared after the last command
	err := s.carry(c, w)
	// Nothing of it outlives the command: its frame is the client's read
	// buffer, which a large command's end gives back (budget.go).
	*c = command{}
	return err
}

// carry takes a command from its plan to its reply on w.
func (s *session) carry(c *command, w carrier) error {
	if err := w.start(c); err != nil {
		return err
	}
	if err := s.admit(c, w); err != nil {
		return err
	}
	if done, err := w.route(c); done || err != nil {
		return err
	}
	d := &c.sp.Decision
	var err error
	switch {
	case s.st.InMulti && plan.Queueable(d):
		o := s.txQueue(c) // transaction.go
		if o.Queued && d.Effect == rewrite.Wire6 {
			s.st.Wire6 = true // a queued EMQ.VERSION: a wire-6 client
		}
		err = w.queued(c, o)
	case c.sp.Exec && d.Action == rewrite.Pass:
		err = w.exec(c)
	case c.sp.Forwards():
		err = w.forward(c)
		s.apply(d)
	default:
		err = w.answer(c)
		s.apply(d)
	}
	return w.settle(err)
}

// admit is where every command begins (serveCommand): it plans the
// command (plan.go) and carries out what the plan asks before anything is
// sent: the wait of a held queue (the carrier sends what was built before
// it), a failed authentication's delay, the reply only the proxy can
// complete, the audit record, and whether the reply is for the client.
func (s *session) admit(c *command, w carrier) error {
	sp := &c.sp
	s.decide(c.f.Args, sp) // plan.go
	if sp.Wait {
		if err := s.waitHeld(c.f.Args, sp, w.flushHeld); err != nil { // plan.go
			return err
		}
	}
	if sp.AuthWait > 0 {
		s.authDelay(sp.AuthWait) // authlimit.go
	}
	s.localReply(c)
	c.audit = s.observe(c.f.Args, &sp.Decision) // observe.go
	c.drop = s.rm.Command(sp.Decision.Effect)
	return nil
}

// localReply completes a reply the proxy makes from what only it knows:
// the server's HELLO reply with the session's id (upstream/dial.go; the first RESP3
// client opens the RESP3 connections, whose boot brings the server's RESP3
// reply), CLIENT LIST of its own clients, CLIENT UNBLOCK and CLIENT KILL
// ID of them (clients.go, package clients).
func (s *session) localReply(c *command) {
	d := &c.sp.Decision
	if d.Action != rewrite.Local {
		return
	}
	switch d.Effect {
	case rewrite.Hello:
		u := c.up(s)
		if d.Proto == 3 && !u.HasHello(3) {
			s.pipeOf(u, upstream.KindReplaced, 3, nil)
		}
		if r := u.HelloReply(d.Proto, s.st.ID); r != nil {
			d.Reply = r
		}
	case rewrite.ClientList:
		d.Reply = s.clientList(d.List) // clients.go
	case rewrite.ClientUnblock:
		d.Reply = s.clientUnblock(d.Target) // clients.go
	case rewrite.ClientKill:
		d.Reply = s.clientKill(d.Target) // clients.go
	case rewrite.Tracking, rewrite.TrackingGetRedir, rewrite.TrackingInfo:
		d.Reply = s.trackingReply(d.Effect, c.f.Args) // tracking.go
	}
}

// apply makes the decision's effect on the session after its reply slot
// was added: on its protocol state (rewrite.State.Apply) and on what the
// session holds for it (the transaction, the WATCH pin, a tracking
// client's connections, connections that speak the old protocol).
func (s *session) apply(d *rewrite.Decision) {
	switch d.Effect {
	case rewrite.Quit:
		s.closing = true
	case rewrite.Reset:
		s.flush()
		s.tx.Clear()
		s.trackReset() // tracking.go
		s.closePinned()
		s.st.Apply(d)
		s.loadView()
	case rewrite.Hello:
		proto := s.proto()
		s.st.Apply(d)
		if s.proto() != proto {
			// The client's own connections speak the old protocol: the
			// next command that needs one opens it anew. (A WATCH pin is
			// never dropped this way: Decide refuses the switch while
			// the client watches.)
			if s.blocker != nil {
				s.blocker.Close()
				s.blocker = nil
			}
			s.closeOwn() // share.go: an isolated client's, opened anew too
		}
	case rewrite.Multi:
		s.st.Apply(d)
		if d.Action == rewrite.Local {
			// MULTI's reply slot, whose +OK the server's own may replace
			// (transaction.go); on the bridge the segment holds no reply
			// slot (-1): the server's replies are relayed.
			s.tx.Begin(len(s.seg.Slots) - 1)
		}
	case rewrite.Discard:
		s.endMulti()
	case rewrite.Unwatch:
		s.unwatch()
	default:
		s.st.Apply(d)
	}
}

// endMulti ends the client's transaction (EXEC, DISCARD): the queue is
// dropped, and the WATCH with it.
func (s *session) endMulti() {
	s.tx.Clear()
	s.st.EndMulti()
	s.unwatch()
}

// unwatch ends the client's WATCH: its pin is released after the current
// segment (forward.go), a bridged client's WATCH leg is no longer bound
// (package pubsub's legs.go).
func (s *session) unwatch() {
	if s.pinned != nil {
		s.unpin = true
	}
	if s.sub != nil {
		s.sub.WatchUp = nil
	}
}
