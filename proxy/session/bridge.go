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
	s.apply(d)
	return pubsub.ErrLeft
}

// onBridge carries a bridged RESP3 client's command (the carrier of
// command.go): on its legs, through the Mode, which appends what goes to
// the server to *out; a reply the proxy makes goes after a barrier. A
// transaction is queued by the proxy, as in normal service (each +OK and
// +QUEUED after a barrier, so it keeps its place), and EXEC sends MULTI,
// the queued commands and EXEC as one unit after a barrier: the relay then
// drops the server's replies to MULTI and the queued commands, which the
// client already had from the proxy, and passes EXEC's on.
type onBridge struct {
	s     *session
	out   *[]byte            // the commands gathered for the current leg (pubsub.Mode's)
	leg   *pubsub.Subscriber // the leg the command goes on (route)
	await bool               // an admitted command sent now: counted until its reply is in (settle)
}

// Bridged serves one command of a bridged RESP3 client (pubsub.Session)
// on the one path (command.go's serveCommand); closing: the session closes
// once it is answered (authlimit.go).
func (s *session) Bridged(f resp.Frame, out *[]byte) (closing bool, err error) {
	s.bridge.out = out
	err = s.serveCommand(f, &s.bridge)
	s.bridge = onBridge{s: s} // holds no leg nor buffer past the command
	return s.closing, err
}

// start gives the plan what only the bridge knows: whether the client may
// be pushed to. The plan passes a subscribed client's unsubscribe family
// inside MULTI (queued, as the server queues it) where it would answer a
// client subscribed to nothing itself, and refuses HELLO 2 while the
// client may be pushed to; before HELLO 2 a barrier makes the
// subscription counts current.
func (b *onBridge) start(c *command) error {
	s, m := b.s, b.s.sub
	if isHello2(c.f.Args) {
		if err := m.Barrier(b.out); err != nil {
			return err
		}
	}
	s.st.Subscribed = s.listing.Subs.Any()
	c.sp.Pushes = m.Tracking || s.st.Subscribed
	return nil
}

// flushHeld waits, before a held command waits, for the replies of what
// was sent.
func (b *onBridge) flushHeld() error { return b.s.sub.Barrier(b.out) }

// route takes a planned command to its leg (bridgeLeg). It ends the
// session past the authentication deadline, and leaves the bridge on
// HELLO 2, which the plan allowed: nothing may push. An admitted command
// queued in the transaction is not sent now (admitted again at EXEC); one
// sent now stays counted until its reply is in (settle).
func (b *onBridge) route(c *command) (done bool, err error) {
	s, sp := b.s, &c.sp
	if s.silent {
		return true, errClose // authlimit.go: past the authentication deadline
	}
	d := &sp.Decision
	if d.Effect == rewrite.Hello && d.Action == rewrite.Local && d.Proto == 2 {
		return true, s.leaveBridge(c)
	}
	sends := sp.Forwards() && (!s.st.InMulti || sp.Exec)
	b.leg, done, err = s.bridgeLeg(c, b.out, sends)
	if done || err != nil {
		return true, err
	}
	if len(s.adm.states) > 0 {
		if s.st.InMulti && !sp.Exec {
			s.release() // queued, not sent: admitted at EXEC
		} else {
			// The control loop acknowledges a hold only once nothing
			// admitted before it waits.
			b.await = true
		}
	}
	return false, nil
}

// settle waits, for an admitted command sent now, until its reply is in,
// and uncounts it.
func (b *onBridge) settle(err error) error {
	if !b.await {
		return err
	}
	b.await = false
	if err == nil {
		err = b.s.sub.Barrier(b.out)
	}
	b.s.release()
	return err
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

// exec sends a bridged transaction: MULTI, the queued commands and EXEC
// as one unit on its leg. With a SCRIPT LOAD fan-out (transaction.go's
// execLoad) EXEC's reply is kept, not relayed: the client gets it once the
// loads it ran are on the other upstreams, so a client that has it may
// EVALSHA anywhere.
func (b *onBridge) exec(c *command) error {
	s, m, out, leg := b.s, b.s.sub, b.out, b.leg
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
	s.endMulti() // EXEC ends the WATCH too
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

// queued hands the reply of a command queued in the transaction (o,
// txQueue's), +QUEUED or the error that aborts the transaction, to the
// client after a barrier.
func (b *onBridge) queued(c *command, o txn.Outcome) error {
	s := b.s
	if !o.Queued {
		if c.drop { // CLIENT REPLY OFF or SKIP: the error too
			s.obs.Reply(c.audit, o.Reply, "")
			return nil
		}
		return s.bridgeLocal(b.out, o.Reply, c.audit)
	}
	s.relayed(c.audit, c.sp.Up)
	if c.drop {
		return nil
	}
	return s.bridgeLocal(b.out, o.Reply, -1)
}

// forward sends a bridged command on its leg, its reply relayed in the
// server's order.
func (b *onBridge) forward(c *command) error {
	s, out, leg := b.s, b.out, b.leg
	m, f, d := s.sub, c.f, &c.sp.Decision
	if t := s.bridgeTap(f, d, c.drop && !m.Muted.Load()); t != nil {
		// Its one reply is the next after a barrier (see tap).
		if err := m.Barrier(out); err != nil {
			return err
		}
		leg.SwapTap(*t)
	}
	s.relayed(c.audit, leg.U)
	if d.Effect == rewrite.Watch && m.WatchUp == nil {
		m.WatchUp = leg.U // package pubsub's legs.go: the bridge is bound to it until EXEC (command.go's unwatch)
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

// answer hands the reply the proxy makes (a refusal, a local reply) to
// the client after a barrier.
func (b *onBridge) answer(c *command) error {
	s, out := b.s, b.out
	f, d := c.f, &c.sp.Decision
	if d.Effect == rewrite.ReplyOn || d.Effect == rewrite.ReplyOff {
		// The replies before it keep their fate; the relay changes after.
		if err := s.sub.Mute(out, s.rm.Muted()); err != nil {
			return err
		}
	}
	// A verb body's SCRIPT LOAD reaches the scripts nodes before the
	// proxy's own answer, as in normal service (segment.go's emit).
	s.bridgeLoad(f, d, nil, false)
	if c.drop || len(d.Reply) == 0 {
		s.obs.Reply(c.audit, d.Reply, "")
		return nil
	}
	return s.bridgeLocal(out, d.Reply, c.audit)
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
