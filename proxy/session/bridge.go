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
	d := &c.sp.Decision
	reply := d.Reply
	if c.drop {
		reply = nil
	}
	s.obs.Reply(c.audit, d.Reply, "")
	var none []byte
	if err := s.sub.FinishWith(&none, reply); err != nil {
		return err
	}
	s.apply(c.f, d)
	return pubsub.ErrLeft
}

// Bridged decides one command of a bridged RESP3 client (bridged) for its
// pubsub.Mode; closing: the session closes once it is answered
// (authlimit.go).
func (s *session) Bridged(f resp.Frame, out *[]byte) (closing bool, err error) {
	err = s.bridged(f, out)
	return s.closing, err
}

// bridged serves one command of a bridged RESP3 client (see above): it is
// admitted as in normal service (session.go's admit: the plan, the wait of
// a held queue, the authentication delay, the audit record), then sent the
// bridge's way: what goes to the server is appended to *out, or what is
// there is sent and a local reply handed to the writer in its place.
//
// A transaction is queued by the proxy in the session's transaction, as in
// normal service (each +OK and +QUEUED after a barrier, so it keeps its
// place), and EXEC sends MULTI, the queued commands and EXEC as one unit
// after a barrier: the relay then drops the server's replies to MULTI and
// the queued commands, which the client already had from the proxy, and
// passes EXEC's on.
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
	}
	// The plan passes a subscribed client's unsubscribe family inside
	// MULTI (queued, as the server queues it) where it would answer a
	// client subscribed to nothing itself, and refuses HELLO 2 while the
	// client may be pushed to.
	s.st.Subscribed = s.listing.Subs.Any()
	sp.Pushes = m.Tracking || s.st.Subscribed
	if err := s.admit(&c, func() error { return m.Barrier(out) }); err != nil {
		return err
	}
	if s.silent {
		return errClose // authlimit.go: past the authentication deadline
	}
	d := &sp.Decision
	if d.Effect == rewrite.Hello && d.Action == rewrite.Local && d.Proto == 2 {
		// Leaving RESP3, nothing may push (the plan refused it otherwise).
		return s.leaveBridge(&c)
	}
	forwarded := sp.Forwards()
	leg, done, err := s.bridgeLeg(&c, out, forwarded && (!s.st.InMulti || sp.Exec))
	if done || err != nil {
		return err
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
		return s.bridgeExec(&c, out, leg)
	case s.st.InMulti && forwarded:
		return s.bridgeQueue(&c, out)
	case forwarded:
		return s.bridgeForward(&c, out, leg)
	}
	return s.bridgeAnswer(&c, out)
}

// bridgeLeg is the leg a bridged command goes on (package pubsub's
// legs.go): the subscriber's own when it sends nothing now, else the leg to
// its upstream, after every reply gathered for another one. done: the
// command was served here (a CLIENT CACHING kept for the next command's
// leg, or the upstream unavailable).
func (s *session) bridgeLeg(c *command, out *[]byte, sends bool) (leg *pubsub.Subscriber, done bool, err error) {
	m := s.sub
	if !sends {
		m.FlushCaching(out)
		return m.Subscriber, false, nil
	}
	if tracking.IsCaching(c.f.Args) {
		// For the leg of the client's next command (package pubsub's legs.go).
		m.KeepCaching(c.f.Raw)
		s.relayed(c.audit, nil)
		return nil, true, nil
	}
	l, err := m.LegFor(c.sp.Up)
	if err != nil {
		s.release()
		m.FlushCaching(out)
		return nil, true, s.bridgeLocal(out, c.sp.Up.Unavailable(), c.audit)
	}
	if err := m.ToLeg(out, l); err != nil {
		return nil, true, err
	}
	return l, false, nil
}

// bridgeExec sends a bridged transaction: MULTI, the queued commands and
// EXEC as one unit on leg. With a SCRIPT LOAD fan-out (transaction.go's
// execLoad) EXEC's reply is kept, not relayed: the client gets it once the
// loads it ran are on the other upstreams, so a client that has it may
// EVALSHA anywhere.
func (s *session) bridgeExec(c *command, out *[]byte, leg *pubsub.Subscriber) error {
	m := s.sub
	var ld *execLoad
	var keep *[]byte
	if len(s.tx.Loads) > 0 {
		ld = &execLoad{up: leg.U, loads: s.tx.Loads}
		s.tx.Loads = nil
		keep = &ld.reply
	}
	if err := m.Exec(out, leg, s.tx.Buf, s.tx.N, c.f.Raw, keep); err != nil {
		return err
	}
	s.endBridgedMulti()
	m.WatchUp = nil // EXEC ends the WATCH
	s.relayed(c.audit, leg.U)
	if ld == nil {
		return nil
	}
	if err := m.Barrier(out); err != nil { // EXEC's reply is in
		return err
	}
	ld.loads = txn.Ran(ld.loads, ld.reply)
	ld.send(s)
	if len(s.seg.Parts) > 0 {
		s.flush()
	}
	if !c.drop && !m.Publish(ld.reply) {
		return m.Failure()
	}
	return nil
}

// bridgeQueue queues a command of a bridged transaction as in normal
// service (transaction.go's queue); its +QUEUED, or the error that aborts
// the transaction, goes after a barrier.
func (s *session) bridgeQueue(c *command, out *[]byte) error {
	o := s.txQueue(c)
	if !o.Queued {
		if c.drop { // CLIENT REPLY OFF or SKIP: the error too
			s.obs.Reply(c.audit, o.Reply, "")
			return nil
		}
		return s.bridgeLocal(out, o.Reply, c.audit)
	}
	s.relayed(c.audit, c.sp.Up)
	if c.sp.Decision.Effect == rewrite.Wire6 {
		s.st.Wire6 = true // as a queued EMQ.VERSION does in normal service
	}
	if c.drop {
		return nil
	}
	return s.bridgeLocal(out, o.Reply, -1)
}

// bridgeForward sends a bridged command on leg, its reply relayed in the
// server's order.
func (s *session) bridgeForward(c *command, out *[]byte, leg *pubsub.Subscriber) error {
	m, f, d := s.sub, c.f, &c.sp.Decision
	if t := s.bridgeTap(f, d, c.drop && !m.Muted.Load()); t != nil {
		// Its one reply is the next after a barrier (see tap).
		if err := m.Barrier(out); err != nil {
			return err
		}
		leg.SwapTap(*t)
	}
	s.relayed(c.audit, leg.U)
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

// bridgeAnswer answers a bridged command the proxy answers itself (a
// refusal, a local reply) after a barrier, and makes its effect on the
// session.
func (s *session) bridgeAnswer(c *command, out *[]byte) error {
	m, f, d := s.sub, c.f, &c.sp.Decision
	if d.Effect == rewrite.ReplyOn || d.Effect == rewrite.ReplyOff {
		// The replies before it keep their fate; the relay changes after.
		if err := m.Mute(out, s.rm.Muted()); err != nil {
			return err
		}
	}
	// A verb body's SCRIPT LOAD reaches the scripts nodes before the
	// proxy's own answer, as in normal service (segment.go's emit).
	s.bridgeLoad(f, d, nil, false)
	if c.drop || len(d.Reply) == 0 {
		s.obs.Reply(c.audit, d.Reply, "")
	} else if err := s.bridgeLocal(out, d.Reply, c.audit); err != nil {
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
