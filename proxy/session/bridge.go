package session

import (
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/tracking"
	"github.com/emqproxy/emqproxy/proxy/txn"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The RESP3 bridge: a subscribed or tracking RESP3 client (package
// pubsub's mode.go) sends any command on its connection of its own, each
// planned as in normal service (plan.go) and sent there by its pubsub.Mode
// (the legs to the upstreams the command routes to, the barriers); the
// relay passes the server's replies and pushes on in the server's order,
// and a reply the proxy makes itself goes after a barrier (Mode.Local), so
// it keeps its place. The plan, and what it changes (the decision state,
// the transaction, the admissions, the audit and capture records), are
// the session's: the Mode asks for them through Bridged.
//
// The bridge ends, and the client is back in normal service, on RESET, and
// on HELLO 2 once the client is subscribed to nothing and does not track
// (its connection is given back; the server's RESP2 HELLO reply answers,
// and the next command travels on the RESP2 shared connections). While it
// is subscribed or tracks, HELLO 2 is refused (by the plan, told so in
// plan.Step.Pushes): a RESP2 connection could not carry its pushes between
// replies.

// leaveBridge answers HELLO 2 of a bridged client subscribed to nothing and
// not tracking: the relay stops after every reply so far, the client gets
// the server's RESP2 HELLO reply, and the session leaves the bridge.
func (s *session) leaveBridge(c *command) error {
	f, d := c.f, &c.sp.Decision
	s.localReply(c)
	audit := s.observe(f.Args, d) // observe.go
	reply := d.Reply
	if s.rm.Command(d.Effect) {
		reply = nil
	}
	s.obs.Reply(audit, d.Reply, "")
	var none []byte
	if err := s.sub.FinishWith(&none, reply); err != nil {
		return err
	}
	s.apply(f, d)
	return pubsub.ErrLeft
}

// Bridged decides one command of a bridged RESP3 client (bridged) for its
// pubsub.Mode; closing: the session closes once it is answered
// (authlimit.go).
func (s *session) Bridged(f resp.Frame, out *[]byte) (closing bool, err error) {
	err = s.bridged(f, out)
	return s.closing, err
}

// bridged decides one command of a bridged RESP3 client (see above) and
// appends what goes to the server to *out, or sends what is there and
// hands a local reply to the writer in its place.
//
// A transaction is queued by the proxy in the session's transaction, as in
// normal service (each +OK and +QUEUED after a barrier, so it keeps its
// place), and EXEC sends MULTI,
// the queued commands and EXEC as one unit after a barrier: the relay then
// drops the server's replies to MULTI and the queued commands, which the
// client already had from the proxy, and passes EXEC's on.
func (s *session) bridged(f resp.Frame, out *[]byte) (err error) {
	m := s.sub
	c := command{f: f}
	sp := &c.sp
	if isHello2(f.Args) {
		// Leaving RESP3 is refused while the client may be pushed to; the
		// subscription counts are current after a barrier (see above).
		if err := m.Barrier(out); err != nil {
			return err
		}
		sp.Pushes = m.Tracking || s.listing.Subs.Any()
	}
	s.decide(f.Args, sp) // plan.go: the same plan as in normal service
	if sp.Wait {
		if err := s.waitHeld(f.Args, sp, func() error { return m.Barrier(out) }); err != nil {
			return err
		}
	}
	if sp.AuthWait > 0 {
		s.authDelay(sp.AuthWait) // authlimit.go
		if s.silent {
			return errClose
		}
	}
	d := &sp.Decision
	if d.Effect == rewrite.Hello && d.Action == rewrite.Local && d.Proto == 2 {
		// Leaving RESP3, nothing may push (the plan refused it otherwise).
		return s.leaveBridge(&c)
	}
	s.localReply(&c)
	audit := s.observe(f.Args, d) // observe.go
	drop := s.rm.Command(d.Effect)
	skipped := drop && !m.Muted.Load() // a SKIP: this reply only
	forwarded := sp.Forwards()
	leg := m.Subscriber
	sends := forwarded && (!s.st.InMulti || sp.Exec)
	if sends && tracking.IsCaching(f.Args) {
		// For the leg of the client's next command (package pubsub's legs.go).
		m.KeepCaching(f.Raw)
		s.relayed(audit, nil)
		return nil
	}
	if !sends {
		m.FlushCaching(out)
	}
	if sends {
		// The leg to the command's upstream (package pubsub's legs.go),
		// after every reply gathered for another one.
		l, err := m.LegFor(sp.Up)
		if err != nil {
			s.release()
			m.FlushCaching(out)
			return s.bridgeLocal(out, sp.Up.Unavailable(), audit)
		}
		if err := m.ToLeg(out, l); err != nil {
			return err
		}
		leg = l
	}
	if len(s.adm.states) > 0 {
		if s.st.InMulti && !sp.Exec {
			s.release() // queued, not sent: admitted at EXEC
		} else {
			// Counted in flight until its reply is in: the control loop
			// acknowledges a hold only once nothing admitted before it waits.
			defer func() {
				if err == nil {
					err = m.Barrier(out)
				}
				s.release()
			}()
		}
	}
	switch {
	case sp.Exec && forwarded:
		var ld *execLoad
		var keep *[]byte
		if len(s.tx.Loads) > 0 {
			// The SCRIPT LOAD fan-out: EXEC's reply is kept, not relayed
			// (transaction.go's execLoad); the client gets it below, once
			// the loads it ran are on the other upstreams.
			ld = &execLoad{up: leg.U, loads: s.tx.Loads}
			s.tx.Loads = nil
			keep = &ld.reply
		}
		if err := m.Exec(out, leg, s.tx.Buf, s.tx.N, f.Raw, keep); err != nil { // MULTI, the queued commands, EXEC
			return err
		}
		s.endBridgedMulti()
		m.WatchUp = nil // EXEC ends the WATCH
		s.relayed(audit, leg.U)
		if ld != nil {
			// Once EXEC's reply is in, the loads it ran go to the other
			// upstreams and are answered, and only then does the client
			// get EXEC's reply: a client that has it may EVALSHA anywhere.
			if err := m.Barrier(out); err != nil {
				return err
			}
			ld.loads = txn.Ran(ld.loads, ld.reply)
			ld.send(s)
			if len(s.seg.Parts) > 0 {
				s.flush()
			}
			if !drop && !m.Publish(ld.reply) {
				return m.Failure()
			}
		}
		return nil
	case s.st.InMulti && forwarded:
		// Queued as in normal service (transaction.go's queue).
		o := s.txQueue(&c)
		if !o.Queued {
			if drop { // CLIENT REPLY OFF or SKIP: the error too
				s.obs.Reply(audit, o.Reply, "")
				return nil
			}
			return s.bridgeLocal(out, o.Reply, audit)
		}
		s.relayed(audit, sp.Up)
		if d.Effect == rewrite.Wire6 {
			s.st.Wire6 = true // as a queued EMQ.VERSION does in normal service
		}
		if drop {
			return nil
		}
		return s.bridgeLocal(out, o.Reply, -1)
	case forwarded:
		if t := s.bridgeTap(f, d, skipped); t != nil {
			// Its one reply is the next after a barrier (see tap).
			if err := m.Barrier(out); err != nil {
				return err
			}
			leg.SwapTap(*t)
		}
		s.relayed(audit, leg.U)
		switch d.Effect {
		case rewrite.Wire6:
			s.st.Wire6 = true // EMQ.VERSION: a wire-6 client, which reads the true version key
		case rewrite.Watch:
			if m.WatchUp == nil {
				m.WatchUp = leg.U // package pubsub's legs.go: the bridge is bound to it until EXEC
			}
		case rewrite.Unwatch:
			m.WatchUp = nil
		}
		m.FlushCaching(out)
		// The SCRIPT LOAD fan-out lands before the client's own load is
		// sent: once its reply is relayed, every upstream has the script.
		s.bridgeLoad(f, d, leg.U, true)
		if err := leg.Add(out, f, d); err != nil {
			return err
		}
		if on, ok := tracking.OnOff(f.Args); ok {
			// Every leg tracks as the client asked (package pubsub's legs.go).
			if err := m.Track(on, f.Raw); err != nil {
				return err
			}
		}
		return nil
	}
	if d.Effect == rewrite.ReplyOn || d.Effect == rewrite.ReplyOff {
		// The replies before it keep their fate; the relay changes after.
		if err := m.Mute(out, s.rm.Muted()); err != nil {
			return err
		}
	}
	// A verb body's SCRIPT LOAD reaches the scripts nodes before the
	// proxy's own answer, as in normal service (segment.go's emit).
	s.bridgeLoad(f, d, nil, false)
	if drop || len(d.Reply) == 0 {
		s.obs.Reply(audit, d.Reply, "")
	} else if err := s.bridgeLocal(out, d.Reply, audit); err != nil {
		return err
	}
	switch d.Effect {
	case rewrite.Multi:
		s.st.InMulti, s.st.MultiAborted = true, false
		s.tx.Begin(-1) // its replies are the server's, relayed
	case rewrite.AbortMulti:
		s.st.MultiAborted = true
	case rewrite.Discard:
		s.endBridgedMulti()
		m.WatchUp = nil
	case rewrite.Auth, rewrite.SetName, rewrite.Hello, rewrite.Wire6, rewrite.SetLibName, rewrite.SetLibVer:
		s.apply(f, d)
	}
	return nil
}

// endBridgedMulti ends a bridged client's transaction.
func (s *session) endBridgedMulti() {
	s.st.InMulti, s.st.MultiAborted = false, false
	s.tx.Clear()
}

// relayed notes on an audit record that the server's reply, from u, went
// to the client unframed.
func (s *session) relayed(audit int, u *upstream.Upstream) {
	if u == nil {
		u = s.sub.U
	}
	s.obs.Relayed(audit, u.Name())
}

// bridgeLocal hands a reply the proxy makes to the client in its place
// among the server's replies: after a barrier.
func (s *session) bridgeLocal(out *[]byte, reply []byte, audit int) error {
	s.obs.Reply(audit, reply, "")
	return s.sub.Local(out, reply)
}

// bridgeTap is the tap a bridged command's reply needs (see tap), or nil:
// its SCRIPT EXISTS patch, its capture record, a SKIP's drop.
func (s *session) bridgeTap(f resp.Frame, d *rewrite.Decision, skipped bool) *pubsub.Tap {
	rec := s.obs.Bridged(f.Args, d, s.began)
	if !rec.Wanted() && !skipped && d.Effect != rewrite.ScriptExists {
		return nil
	}
	t := &pubsub.Tap{Pass: !skipped, Rec: rec}
	if d.Effect == rewrite.ScriptExists {
		t.Map = s.v.Pol.Map
		for _, a := range f.Args {
			t.Patch = append(t.Patch, append([]byte(nil), a...))
		}
	}
	return t
}

// bridgeLoad sends the SCRIPT LOAD fan-out of a bridged command
// (scriptload.go's alsoLoad), if it has one, and awaits it, dropping the
// replies.
func (s *session) bridgeLoad(f resp.Frame, d *rewrite.Decision, routed *upstream.Upstream, shared bool) {
	s.alsoLoad(f, d, routed, shared)
	if len(s.seg.Parts) > 0 {
		s.flush()
	}
}

// isHello2 reports whether args is HELLO asking for protocol 2: the one
// command whose plan on the bridge needs to know whether the client may be
// pushed to.
func isHello2(args [][]byte) bool {
	if len(args) < 2 || !rewrite.EqualFold(args[0], "HELLO") {
		return false
	}
	v, ok := resp.ParseInt(args[1])
	return ok && v == 2
}
