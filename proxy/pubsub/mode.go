package pubsub

import (
	"context"
	"errors"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Subscribe mode.
//
// A client's SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE opens a connection of its
// own to the upstream (dialed, booted and fenced like every other), and the
// client stays bridged to it until the server says it left subscribe mode.
// Both directions carry raw bytes: the client's commands as it framed
// them, the server's confirmations, messages and PING replies as the server
// framed them (cut with the reply framer, never decoded).
//
// What the proxy decides in subscribe mode:
//   - (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE and PING go to the server, which
//     answers them as it does for a subscribed client.
//   - Any other command is sent only after a barrier (below) shows the
//     connection is still subscribed: the server then refuses it with its own
//     text ("Can't execute '<cmd>': only (P|S)SUBSCRIBE / ..."), unknown
//     command and arity errors included, and runs nothing. If the barrier
//     shows the client left subscribe mode, the command is not sent there:
//     the session returns to normal service and decides it as usual.
//   - QUIT and RESET: after a barrier, the proxy answers +OK (and closes) or
//     +RESET (and resets the session) itself and closes the connection.
//
// The barrier is `PING <nonce>` with a random nonce: the server answers
// commands in order, so when its reply arrives every earlier reply has been
// relayed; a subscribed connection answers it as an array
// (`*2 pong <nonce>`), a connection no longer subscribed as a bulk string.
// The reply is not relayed. The proxy sends one when a client sends a
// command subscribe mode does not allow, and when the server sends an
// unsubscribe confirmation with a count of 0 or an error (the hints that the
// client may have left), so an idle client that unsubscribed from
// everything is back in normal service at once.
//
// As with the server, the session's idle timeout does not apply to a
// subscribed client. Commands in subscribe mode are not decided by
// rewrite.Decide (nothing runs but the subscribe commands and PING) and are
// not audited.
//
// A RESP3 client (HELLO 3) is bridged the same way when it subscribes or
// turns CLIENT TRACKING on, and stays bridged until RESET, HELLO 2 once it
// is subscribed to nothing and does not track, or the end of its connection
// (package session's bridge.go): in RESP3 a subscribed or tracking client
// may send any command, and the server's pushes (messages, invalidations)
// arrive on its own connection between the replies. Every command is then
// planned as in normal service (package plan: rewrites, refusals, the
// version key, routing, the control table, audit records, whose reply field
// says "relayed" for what the server answered) and sent on the client's own
// connection, whose replies and pushes the relay passes on in the server's
// order; a reply the proxy makes itself goes after a barrier (Local), so it
// keeps its place. Transactions, WATCH and blocking commands run on the
// server as they would on a direct connection (the connection is the
// client's own); a command the proxy refuses inside MULTI makes EXEC answer
// EXECABORT, with the server's transaction discarded.
//
// A slow subscriber is bounded: the relay keeps reading the upstream, and
// the replies waiting for the client may take the proxy's MaxReplyBytes;
// past that the client is closed and counted (client_rejected{reason=
// "subscriber_bytes"}). A write to the client is bounded by its
// WriteTimeout.

// Local replies in subscribe mode.
var (
	replySubOK    = []byte("+OK\r\n")
	replySubReset = []byte("+RESET\r\n")
)

// ErrLeft is what Session.Bridged returns when the client left the bridge
// (HELLO 2, answered): the session goes on in normal service.
var ErrLeft = errors.New("bridge left")

// Session is what subscribe mode needs of the client's session, which
// implements it (package session). The session keeps the client's input
// (its read buffer, the framer, the client read), its CLIENT REPLY mode and
// the plan of a bridged command with everything the plan changes (the
// decision state, the transaction, the audit records); Mode keeps the
// connections and what is sent on them. Each method is a whole step on the
// session's side, so the two meet at a few points only: framing a command,
// asking whether its reply is dropped, serving a bridged command, RESET.
type Session interface {
	// Begin starts serving what the client's last read brought: the
	// commands framed from now on are decided under the current view and
	// their audit records timed from now.
	Begin()
	// Next frames the client's next command in the session's buffer.
	// Framed: the command is taken from the buffer. Incomplete: no
	// complete command is left; the session wrote the audit records of
	// the commands served and published what CLIENT LIST shows. Invalid:
	// a protocol error, whose reply is errReply.
	Next() (f resp.Frame, status resp.Status, errReply []byte)
	// Unread puts back the command Next took last: the session decides it
	// in normal service.
	Unread()
	// Dropped starts a command whose decision has effect e on the
	// client's CLIENT REPLY mode, and reports whether its reply is
	// dropped.
	Dropped(e rewrite.Effect) bool
	// Muted reports whether the client's CLIENT REPLY mode drops every
	// reply for now (OFF).
	Muted() bool
	// InMulti reports whether the client is in a transaction: a bridged
	// client's subscribe commands and PING are then queued by Bridged, as
	// a server queues them, not sent on their own.
	InMulti() bool
	// Bridged plans and serves one command of a bridged RESP3 client
	// that is not QUIT or RESET, nor (outside a transaction) the
	// subscribe family's or PING, appending
	// what goes to the server to *out (through the Mode's legs and
	// barriers). ErrLeft: the client left the bridge. closing: the
	// session closes once the command is answered.
	Bridged(f resp.Frame, out *[]byte) (closing bool, err error)
	// Reset applies RESET to the session, once it is answered.
	Reset()
}

// Env is what a Mode is given besides its Subscriber and session.
type Env struct {
	Ctx       context.Context    // the server's: a leg's dial ends with it
	ID        uint64             // the session's id, its Redirects target
	Redir     *Redirects         // the server's registry of the sessions that can be pushed to
	Transport upstream.Transport // gives the legs (upstream.Via: nil is Direct)
}

// Mode is a session's subscribe mode: the Subscriber (the relay, the
// writer, the barrier, the bridge's legs) and the commands gathered for it
// in a round. The session's one loop serves it: Round frames and sends the
// client's commands; the session's fill waits for the client's bytes and
// for what the Subscriber reports (Hint, Ended, LegDown).
type Mode struct {
	*Subscriber
	s       Session
	env     Env
	out     []byte // the commands gathered for the current leg
	started bool   // its relay and writer run (Round's first call)
}

// NewMode makes the subscribe mode of session s on sub, whose command
// that entered is the first sent.
func NewMode(sub *Subscriber, s Session, env Env) *Mode {
	return &Mode{Subscriber: sub, s: s, env: env, out: sub.First}
}

// Round is subscribe mode's round: the first one starts the relay and the
// writer; each frames the complete commands in the session's buffer
// (commands), sends what goes to the server, and ends the Mode (ended)
// when the client left subscribe mode (the session goes on in normal
// service with the bytes still buffered) or quit (with ErrClose). An
// error ends the session.
func (m *Mode) Round() (ended bool, err error) {
	sub := m.Subscriber
	if !m.started {
		m.started = true
		sub.Start()
		m.env.Redir.Attach(m.env.ID, sub) // a redirect target
		if sub.SkipFirst {
			// A SKIP silenced the command that entered: its replies are
			// the ones before the barrier.
			subscribed, err := sub.SendChecked(&m.out)
			if err != nil {
				return false, err
			}
			sub.Muted.Store(m.s.Muted())
			if !subscribed {
				m.End(false)
				return true, nil
			}
		}
	}
	leave, quit, err := m.commands(&m.out)
	if err != nil {
		return false, err
	}
	if err := sub.Cur.Send(m.out); err != nil {
		return false, err
	}
	m.out = m.out[:0]
	if cap(m.out) > pipe.KeptBatchBuf {
		m.out = nil // do not keep a large command's copy around
	}
	if leave || quit {
		m.End(false)
		if quit {
			return true, ErrClose
		}
		return true, nil
	}
	return false, nil
}

// End ends subscribe mode: the relays stop, after handing on every reply
// so far unless abort (the client is being closed), and the session is
// back in normal service. A Subscriber never started gives its connection
// back.
func (m *Mode) End(abort bool) {
	sub := m.Subscriber
	if !m.started {
		sub.Abandon()
		return
	}
	sub.Stop(abort)
	m.env.Redir.Detach(m.env.ID, sub)
	sub.c.Subs.Clear()
}

// commands handles the complete commands in the session's buffer,
// appending those that go to the server to *out. leave: the client left
// subscribe mode (after RESET, or before a command that is not sent).
// quit: the client sent QUIT or a protocol error, and was answered.
func (m *Mode) commands(out *[]byte) (leave, quit bool, err error) {
	sub, s := m.Subscriber, m.s
	s.Begin()
	for {
		f, status, errReply := s.Next()
		switch status {
		case resp.Incomplete:
			if sub.RESP3 {
				m.FlushCaching(out) // legs.go: no command follows in this read
			}
			return false, false, nil
		case resp.Invalid:
			sub.c.Met.Reject("protocol")
			if s.Dropped(rewrite.NoEffect) {
				errReply = nil
			}
			if sub.RESP3 {
				m.FlushCaching(out) // legs.go
			}
			if err := m.ToLeg(out, sub); err != nil { // legs.go
				return false, false, err
			}
			return false, true, sub.FinishWith(out, errReply)
		}
		kind := KindOf(f.Args[0])
		if kind == SubForward && sub.RESP3 && s.InMulti() {
			kind = SubOther // queued in the transaction (Session.InMulti)
		}
		if kind != SubOther {
			// Subscribe commands, PING, QUIT and RESET are the bridge's
			// first connection's (legs.go).
			if sub.RESP3 {
				m.FlushCaching(out)
			}
			if err := m.ToLeg(out, sub); err != nil {
				return false, false, err
			}
		}
		if sub.RESP3 && kind == SubOther {
			closing, err := s.Bridged(f, out)
			if errors.Is(err, ErrLeft) {
				return true, false, nil
			} else if err != nil {
				return false, false, err
			}
			if closing { // after the reply
				if err := m.ToLeg(out, sub); err != nil {
					return false, false, err
				}
				return false, true, sub.FinishWith(out, nil)
			}
			continue
		}
		switch kind {
		case SubForward:
			if s.Dropped(rewrite.NoEffect) && !s.Muted() && sub.RESP3 {
				// A SKIP (only a bridged RESP3 client sends one here):
				// whatever the command's replies, they come before the
				// barrier after it.
				if err := m.sendSkipped(out, f.Raw); err != nil {
					return false, false, err
				}
				continue
			}
			if err := sub.Add(out, f, nil); err != nil {
				return false, false, err
			}
		case SubQuit:
			reply := replySubOK
			if s.Dropped(rewrite.Quit) {
				reply = nil
			}
			return false, true, sub.FinishWith(out, reply)
		case SubReset:
			reply := replySubReset
			if s.Dropped(rewrite.Reset) {
				reply = nil
			}
			if err := sub.FinishWith(out, reply); err != nil {
				return false, false, err
			}
			s.Reset()
			return true, false, nil
		default:
			if err := sub.Send(*out); err != nil {
				return false, false, err
			}
			*out = (*out)[:0]
			subscribed, err := sub.Check(false)
			if err != nil {
				return false, false, err
			}
			if !subscribed {
				s.Unread()
				return true, false, nil // decided by the normal loop
			}
			s.Dropped(rewrite.NoEffect)                  // refused by the server: changes no mode
			if err := sub.Add(out, f, nil); err != nil { // the server refuses it with its own text
				return false, false, err
			}
		}
	}
}

// sendSkipped sends a bridged RESP3 client's command whose replies a SKIP
// silences, when how many replies it gets is not known (a subscribe
// command gets pushes only, or one error): the relay is muted from a
// barrier before it to a barrier after it.
func (m *Mode) sendSkipped(out *[]byte, raw []byte) error {
	sub := m.Subscriber
	if _, err := sub.SendChecked(out); err != nil {
		return err
	}
	sub.Muted.Store(true)
	*out = append(*out, raw...)
	if _, err := sub.SendChecked(out); err != nil {
		return err
	}
	sub.Muted.Store(m.s.Muted())
	return nil
}

// Barrier sends what is in *out to the current leg (legs.go) and waits
// until every reply to it has been handed to the writer.
func (m *Mode) Barrier(out *[]byte) error {
	_, err := m.Cur.SendChecked(out)
	return err
}

// Local hands a reply the proxy makes to the client in its place among
// the server's replies: after a barrier.
func (m *Mode) Local(out *[]byte, reply []byte) error {
	if err := m.Barrier(out); err != nil {
		return err
	}
	if !m.Publish(reply) {
		return m.Failure()
	}
	return nil
}

// Mute sets the relay's CLIENT REPLY mode to muted (the client's CLIENT
// REPLY ON or OFF) when it changes: the replies before it keep their fate,
// so the relay changes after a barrier.
func (m *Mode) Mute(out *[]byte, muted bool) error {
	if m.Muted.Load() == muted {
		return nil
	}
	if err := m.Barrier(out); err != nil {
		return err
	}
	m.Muted.Store(muted)
	return nil
}

// Exec sends a bridged transaction on leg as one unit after a barrier:
// unit (MULTI and the n queued commands, as the session queued them), then
// exec (EXEC as the client sent it). Every reply before the unit is relayed
// first; then the relay drops MULTI's and each queued command's, which the
// client already had from the proxy, and passes EXEC's on, or, with keep,
// keeps it there instead.
func (m *Mode) Exec(out *[]byte, leg *Subscriber, unit []byte, n int, exec []byte, keep *[]byte) error {
	if err := m.Barrier(out); err != nil {
		return err
	}
	m.FlushCaching(out)
	for range n + 1 {
		leg.Swap(nil)
	}
	// EXEC's reply: passed on, or kept (keep); either way the subscribe
	// confirmations in it keep the counts.
	leg.SwapTap(Tap{Keep: keep, Pass: keep == nil, Nested: true})
	if err := leg.Add(out, resp.Frame{Raw: unit}, nil); err != nil {
		return err
	}
	*out = append(*out, exec...)
	return nil
}
