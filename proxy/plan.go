package proxy

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The plan.
//
// Every command a session reads, in every mode (normal service, a WATCH
// pin, a blocking command, a transaction queued and sent at EXEC, a
// pipeline split across routes, a bridged RESP3 client), is decided by
// plan and nowhere else. In order:
//
//  1. rewrite.Decide, under the view's policy;
//  2. a wrong password is counted against the connection and its address
//     (authlimit.go; the delay it earns is the caller's to wait);
//  3. before authentication, the server's unknown-command and arity errors,
//     which the server answers before it asks for a password (queuecheck.go);
//  4. inside MULTI, the server's queue-time errors (queuecheck.go);
//  5. the shared-connection rule (rule.go);
//  6. the command's keys, found once, and from them its route
//     (route_session.go): CROSSROUTE refusals, the binding of a WATCH pin, a
//     transaction or a bridged connection, the scripts role (a verb rewrite
//     becomes a pass on a scripts upstream); at EXEC the route is recomputed
//     from the queues of what was queued, under the routes of now;
//  7. with the control table on, admission by the same keys' queues
//     (hold.go): an admitted command counts in flight in the state it was
//     admitted under.
//
// Nothing in it waits and nothing in it sends: what only the network can
// tell comes in as an input of the step. A command whose queue is held
// yields a step that says so (wait); the caller sends what it built so far,
// gets its replies, waits for a new control state (waitHeld) and plans the
// command again, up to the hold; past it the command is refused with
// TRYAGAIN. A command whose keys only the server can tell (COMMAND GETKEYS,
// when there are routes to choose from) yields a step that says so
// (needKeys); the caller asks the server (getkeys) and plans it again with
// the keys (decide). A bridged client's HELLO 2 is refused while it may be
// pushed to (pushes, which its caller learns after a barrier).
//
// After the plan, a local answer's bytes are composed from what only the
// proxy holds (localReply: the server's HELLO reply with the session's id,
// CLIENT LIST of its sessions); the decision itself is not changed.
//
// A round decides under one view: the policy, the routes, the control state
// and the fences, loaded once at its start (loadView); only a control state
// that changes while a command is being admitted makes the plan load the
// state and the routes again (admitted commands must count in the newest
// state, hold.go).

// view is what a round decides under.
type view struct {
	pol    *rewrite.Policy
	routes *router
	ctl    *ctlState // the control table's state; nil when it is off
}

// loadView takes the view for a round: the control state before the routes
// (the control loop stores the routes first), and the fences into the
// decision state.
func (s *session) loadView() {
	if c := s.srv.ctl; c != nil {
		s.v.ctl = c.state.Load()
	}
	s.v.routes = s.srv.routes.Load()
	s.v.pol = s.srv.policy.Load()
	s.st.Fenced = s.srv.fenced()
	s.st.NoSub = s.srv.noSub()
	s.st.SetInfo = s.srv.keys.SetInfo()
}

// cmdBufs are backing arrays a command's values borrow, kept on the session
// so a command allocates none: its keys (planStep.cmdKeys) and their
// positions in its arguments. Nothing in them is read after the command.
type cmdBufs struct {
	keys   [][]byte
	keyPos []int
}

// planStep is what plan makes of one command.
type planStep struct {
	d  rewrite.Decision
	up *upstream.Upstream // where a forwarded command goes; nil when nothing is forwarded
	// wait: a queue of the command may not be sent under the view's control
	// state: held (heldUp nil) or routed to a node whose lease lapsed
	// (heldUp). The caller waits (waitHeld) and plans again.
	wait   bool
	heldQ  []byte
	heldUp *upstream.Upstream
	// authWait is the delay a failed authentication earned, waited by the
	// caller before the reply.
	authWait time.Duration
	// exec: the command is the EXEC of the session's transaction.
	exec bool
	// needKeys: the command's keys need COMMAND GETKEYS; the caller asks
	// and plans again with them in keys (decide).
	needKeys bool

	// cmdKeys are the command's keys, found once (findKeys): what routing,
	// admission and a transaction's route read; keyed says the command
	// routes by its keys (or is a script call). cmdKeys lends its backing
	// array from the session (cmdBufs): valid until the next command.
	cmdKeys [][]byte
	keyed   bool
	// entry is the command's entry in the server's command table, looked
	// up once (by the rule); script: it is a script call (EVAL and
	// EVALSHA, _RO or not), whose keys are the decision's (d.Keys).
	entry  *cmdtable.Entry
	script bool

	// Inputs, kept when the step is planned again: the keys the server
	// gave (asked: keys holds them), and whether the client may be pushed
	// to (a bridged RESP3 client that is subscribed or tracks).
	keys   [][]byte
	asked  bool
	pushes bool
}

// decide plans one command, asking the server for its keys when the plan
// says it needs them (the one round trip the plan itself never makes).
func (s *session) decide(args [][]byte, sp *planStep) {
	s.plan(args, sp)
	if sp.needKeys {
		sp.keys, sp.asked = s.getkeys(s.v.routes, args), true // route_session.go
		s.plan(args, sp)
	}
}

// forwards reports whether the step sends the command to an upstream.
func (sp *planStep) forwards() bool {
	return sp.d.Action == rewrite.Pass || sp.d.Action == rewrite.Rewrite
}

// plan decides one command (see above) into sp.
func (s *session) plan(args [][]byte, sp *planStep) {
	for {
		if s.planOnce(args, sp) {
			return
		}
		// The control state changed while the command was admitted: plan
		// it under the new one (and the routes stored before it).
		s.v.ctl = s.srv.ctl.state.Load()
		s.v.routes = s.srv.routes.Load()
	}
}

// planOnce is one attempt of plan; false when the control state changed
// while the command was being admitted.
func (s *session) planOnce(args [][]byte, sp *planStep) bool {
	*sp = planStep{d: rewrite.Decide(args, &s.st, s.v.pol), keys: sp.keys, asked: sp.asked, pushes: sp.pushes}
	d := &sp.d
	if sp.pushes && d.Effect == rewrite.Hello && d.Action == rewrite.Local && d.Proto == 2 {
		// A RESP2 connection cannot carry pushes between replies (bridge.go).
		*d = rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonProtocol, Reply: replyBridgedHello}
	}
	sp.exec = d.Effect == rewrite.Exec && s.st.InMulti
	if d.Reason == rewrite.ReasonWrongPass {
		sp.authWait = s.authFailed() // authlimit.go
	}
	if d.Reason == rewrite.ReasonNoAuth && d.Effect == rewrite.NoEffect {
		// The server rejects an unknown command or a wrong number of
		// arguments before it asks for authentication (queuecheck.go).
		if reply, reason := commandError(&s.srv.keys, args); reply != nil {
			*d = rewrite.Decision{Action: rewrite.Refuse, Reason: reason, Reply: reply}
		}
	}
	if s.st.InMulti {
		s.queueCheck(args, d) // queuecheck.go: the server's queue-time errors
	}
	sp.entry = s.shareRule(args, d) // rule.go: the shared-connection rule
	if !sp.forwards() {
		return true
	}
	sp.script = isScriptCall(args[0])
	if !s.findKeys(args, sp) {
		sp.needKeys = true // the caller asks the server (decide)
		return true
	}
	sp.up = s.routeDecision(args, sp) // route_session.go
	if sp.up == nil || s.v.ctl == nil {
		return true
	}
	return s.admitStep(sp) // hold.go
}

// waitHeld waits for the held queue of sp (hold.go) and plans the command
// again until it may be sent or the hold is over, then it is refused with
// TRYAGAIN. flush first sends what the session built and gets its replies,
// so nothing admitted before the command stays in flight while it waits.
func (s *session) waitHeld(args [][]byte, sp *planStep, flush func() error) error {
	c := s.srv.ctl
	began := time.Now()
	deadline := began.Add(c.opts.Hold)
	c.heldNow.Inc()
	defer func() {
		c.heldNow.Dec()
		c.holdSecs.Observe(time.Since(began).Seconds())
	}()
	if err := flush(); err != nil {
		return err
	}
	s.release()
	for sp.wait {
		now := time.Now()
		if !now.Before(deadline) {
			exec := sp.exec
			s.refuseHeld(&sp.d, sp.heldQ, sp.heldUp)
			sp.up, sp.wait, sp.exec = nil, false, exec
			return nil
		}
		t := time.NewTimer(min(deadline.Sub(now), c.opts.Poll/5+time.Millisecond))
		select {
		case <-s.v.ctl.changed:
		case <-t.C:
		case <-s.srv.ctx.Done():
		}
		t.Stop()
		s.v.ctl = c.state.Load()
		s.v.routes = s.srv.routes.Load()
		s.decide(args, sp)
	}
	return nil
}

// findKeys finds the keys of a command Decide forwards, once, in
// sp.cmdKeys: what routing, admission and their queues read. Nothing is
// looked at when every route leads to one upstream and the control table is
// off (no key needs looking at); a command whose keys only COMMAND GETKEYS
// can tell takes them from sp when there are routes to choose from, and
// false says they were not asked yet.
func (s *session) findKeys(args [][]byte, sp *planStep) bool {
	if s.v.routes.single && s.v.ctl == nil {
		return true
	}
	if sp.script {
		sp.cmdKeys = sp.d.Keys // Decide's, in the arguments: nothing to copy
		return true
	}
	keys := s.bufs.keys[:0]
	ck := sp.entry
	switch {
	case ck == nil:
	case ck.Ask:
		if !s.v.routes.single {
			if !sp.asked {
				return false
			}
			keys = append(keys, sp.keys...)
		}
	default:
		s.bufs.keyPos = ck.Positions(args, s.bufs.keyPos[:0])
		for _, i := range s.bufs.keyPos {
			keys = append(keys, args[i])
		}
	}
	s.bufs.keys, sp.cmdKeys = keys, keys
	return true
}

// queuesOfKeys returns the queues (hashtags) of the keys findKeys found,
// in s.adm.qs.
func (s *session) queuesOfKeys(keys [][]byte) [][]byte {
	qs := s.adm.qs[:0]
	for _, k := range keys {
		if q := rewrite.Hashtag(k); q != nil {
			qs = append(qs, q)
		}
	}
	s.adm.qs = qs
	return qs
}
