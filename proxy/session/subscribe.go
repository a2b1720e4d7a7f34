package session

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/tracking"
	"github.com/emqproxy/emqproxy/proxy/upstream"
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
// As with the server, Options.IdleTimeout does not apply to a subscribed
// client. Commands in subscribe mode are not decided by rewrite.Decide
// (nothing runs but the subscribe commands and PING) and are not audited.
//
// A RESP3 client (HELLO 3) is bridged the same way when it subscribes or
// turns CLIENT TRACKING on, and stays bridged until RESET, HELLO 2 once it
// is subscribed to nothing and does not track, or the end of its connection
// (bridge.go): in RESP3 a subscribed or tracking client may send any
// command, and the server's pushes (messages, invalidations) arrive on its
// own connection between the replies. Every command is then planned as in
// normal service (package plan: rewrites, refusals, the version key, routing,
// the control table, audit records, whose reply field says "relayed" for
// what the server answered) and sent on the client's own connection, whose
// replies and pushes the relay passes on in the server's order; a reply the
// proxy makes itself goes after a barrier, so it keeps its place.
// Transactions, WATCH and blocking commands run on the server as they would
// on a direct connection (the connection is the client's own); a command
// the proxy refuses inside MULTI makes EXEC answer EXECABORT, with the
// server's transaction discarded.
//
// A slow subscriber is bounded: the relay keeps reading the upstream, and
// the replies waiting for the client may take Options.MaxReplyBytes; past
// that the client is closed and counted (client_rejected{reason=
// "subscriber_bytes"}). A write to the client is bounded by WriteTimeout.

// Local replies in subscribe mode.
var (
	replySubOK    = []byte("+OK\r\n")
	replySubReset = []byte("+RESET\r\n")
)

// subMode is the session's side of subscribe mode: the Subscriber (package
// pubsub: the relay, the writer, the barrier, the bridge's legs) and the
// commands gathered for it in a round. The session's one loop (serve)
// serves it: subRound frames and sends the client's commands, subFill
// waits for the client's bytes and for what the server's side reports.
type subMode struct {
	*pubsub.Subscriber
	out     []byte // the commands gathered for the current leg
	started bool   // its relay and writer run (subRound's first call)
}

// startSubscribe handles a subscribe command decided outside subscribe
// mode: the commands before it are answered first, then the session's
// round ends and its loop serves subscribe mode (s.sub is set). When the
// upstream connection cannot be opened the command gets the unavailable
// error.
func (s *session) startSubscribe(u *upstream.Upstream, c *command) {
	f, audit := c.f, c.audit
	s.flush()
	dl, err := u.Own(s.srv.Ctx, s.proto()) // upstream/owned.go
	if err != nil {
		s.log.Warn("subscriber upstream connection failed", zap.Error(err))
		s.addLocal(u.Unavailable(), audit, c.drop)
		return
	}
	sub := pubsub.New(s.client(), u, dl, f.Raw, int(min(s.srv.Cfg.MaxReplyBytes, int64(^uint(0)>>1))), s.proto() == 3)
	if on, _ := tracking.OnOff(f.Args); on {
		sub.Tracking, sub.TrackRaw = true, append([]byte(nil), f.Raw...)
	}
	sub.Muted.Store(c.drop)
	sub.SkipFirst = c.drop && !s.rm.muted()
	s.sub = &subMode{Subscriber: sub, out: sub.First}
}

// client is what subscribe mode's goroutines and a tracking redirect's
// relay need of the session (package pubsub).
func (s *session) client() *pubsub.Client {
	return &pubsub.Client{Conn: s.nc, Log: s.log, Mem: s.srv.Mem, Met: s.srv.Met,
		WriteTimeout: s.srv.Cfg.WriteTimeout, Subs: &s.listing.Subs}
}

// subRound is subscribe mode's round: the first one starts the relay and
// the writer; each frames the complete commands in the buffer
// (subCommands), sends what goes to the server, and leaves subscribe mode
// when the client did (s.sub is nil again: the loop goes on in normal
// service with the bytes still buffered). An error ends the session.
func (s *session) subRound() (err error) {
	sub := s.sub
	defer s.recoverSub(&err)
	if !sub.started {
		sub.started = true
		sub.Start()
		s.srv.Redir.Attach(s.id, sub.Subscriber) // tracking.go: a redirect target
		if sub.SkipFirst {
			// A SKIP silenced the command that entered: its replies are
			// the ones before the barrier.
			subscribed, err := sub.SendChecked(&sub.out)
			if err != nil {
				return err
			}
			sub.Muted.Store(s.rm.muted())
			if !subscribed {
				s.endSub(false)
				return nil
			}
		}
	}
	leave, quit, err := s.subCommands(&sub.out)
	if err != nil {
		return err
	}
	if err := sub.Cur.Send(sub.out); err != nil {
		return err
	}
	sub.out = sub.out[:0]
	if cap(sub.out) > pipe.KeptBatchBuf {
		sub.out = nil // do not keep a large command's copy around
	}
	if leave || quit {
		s.endSub(false)
		if quit {
			return errClose
		}
		return nil
	}
	if s.srv.Closing.Load() {
		return ErrServerClosed
	}
	return nil
}

// subFill waits in subscribe mode until the client sent more (nil), the
// client left subscribe mode (nil, s.sub is nil), or the session ends (an
// error): the client read goes on while the server's side reports a hint
// that the client may have left, or the end of a relay.
func (s *session) subFill() (err error) {
	sub := s.sub
	defer s.recoverSub(&err)
	if !s.rd.out {
		if err := s.room(); err != nil { // input.go
			return err
		}
		s.readAsync()
	}
	for {
		select {
		case r := <-s.rd.done:
			err := s.readDone(r)
			if errors.Is(err, os.ErrDeadlineExceeded) && !s.srv.Closing.Load() {
				// A deadline set before subscribe mode (IdleTimeout does
				// not apply to a subscribed client).
				_ = s.nc.SetReadDeadline(time.Time{})
				return nil
			}
			return err
		case <-sub.Hint:
			subscribed, err := sub.Check(false)
			if err != nil {
				return err
			}
			if !subscribed {
				if err := s.stopRead(); err != nil {
					return err
				}
				s.endSub(false)
				return nil
			}
		case <-sub.Ended:
			return sub.Failure()
		case <-sub.LegDown:
			return sub.LegFailure() // legs.go
		case <-s.srv.Ctx.Done():
			return ErrServerClosed
		}
	}
}

// recoverSub turns a panic in subscribe mode into the session's end (the
// client is closed by cleanup, as for any error).
func (s *session) recoverSub(err *error) {
	if r := recover(); r != nil {
		s.srv.Met.Panics.Inc()
		s.log.Error("panic in subscribe mode; closing the client", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
		*err = fmt.Errorf("panic: %v", r)
	}
}

// endSub ends subscribe mode: the relays stop, after handing on every
// reply so far unless abort (the client is being closed), and the
// session is back in normal service. A Subscriber never started gives its
// connection back.
func (s *session) endSub(abort bool) {
	sub := s.sub
	s.sub = nil
	if !sub.started {
		sub.Abandon()
		return
	}
	sub.Stop(abort)
	s.srv.Redir.Detach(s.id, sub.Subscriber)
	s.listing.Subs.Clear()
}

// subCommands handles the complete commands in the client's buffer,
// appending those that go to the server to *out. leave: the client left
// subscribe mode (after RESET, or before a command that is not sent). quit:
// the client sent QUIT or a protocol error, and was answered.
func (s *session) subCommands(out *[]byte) (leave, quit bool, err error) {
	sub := s.sub.Subscriber
	s.fr.Reset()
	s.loadView()         // plan.go: once per read, as in normal service
	s.began = time.Now() // the audit records' latency_us: from this read
	for {
		f, status, n, need, errReply := s.fr.Next(s.buf[s.start:s.end])
		switch status {
		case resp.Skipped:
			s.start += n
			continue
		case resp.Incomplete:
			s.need = need
			if sub.RESP3 {
				s.flushCaching(out) // legs.go: no command follows in this read
			}
			s.logAudits() // before the next read reuses the buffer
			s.publish(time.Now())
			return false, false, nil
		case resp.Invalid:
			s.srv.Met.Rejected.WithLabelValues("protocol").Inc()
			if s.rm.command(rewrite.NoEffect) {
				errReply = nil
			}
			if sub.RESP3 {
				s.flushCaching(out) // legs.go
			}
			if err := s.toLeg(out, sub); err != nil { // legs.go
				return false, false, err
			}
			return false, true, sub.FinishWith(out, errReply)
		}
		s.listing.LastArgs = f.Args // CLIENT LIST's cmd
		kind := pubsub.KindOf(f.Args[0])
		if kind != pubsub.SubOther {
			// Subscribe commands, PING, QUIT and RESET are the bridge's
			// first connection's (legs.go).
			if sub.RESP3 {
				s.flushCaching(out)
			}
			if err := s.toLeg(out, sub); err != nil {
				return false, false, err
			}
		}
		if sub.RESP3 && kind == pubsub.SubOther {
			s.start += n
			if err := s.bridged(f, out); errors.Is(err, errBridgeLeft) {
				return true, false, nil
			} else if err != nil {
				return false, false, err
			}
			if s.closing { // authlimit.go: after the reply
				if err := s.toLeg(out, sub); err != nil {
					return false, false, err
				}
				return false, true, sub.FinishWith(out, nil)
			}
			continue
		}
		switch kind {
		case pubsub.SubForward:
			s.start += n
			if s.rm.command(rewrite.NoEffect) && !s.rm.muted() && sub.RESP3 {
				// A SKIP (only a bridged RESP3 client sends one here):
				// whatever the command's replies, they come before the
				// barrier after it.
				if err := s.sendSkipped(out, f.Raw); err != nil {
					return false, false, err
				}
				continue
			}
			if err := sub.Add(out, f, nil); err != nil {
				return false, false, err
			}
		case pubsub.SubQuit:
			s.start += n
			reply := replySubOK
			if s.rm.command(rewrite.Quit) {
				reply = nil
			}
			return false, true, sub.FinishWith(out, reply)
		case pubsub.SubReset:
			s.start += n
			reply := replySubReset
			if s.rm.command(rewrite.Reset) {
				reply = nil
			}
			if err := sub.FinishWith(out, reply); err != nil {
				return false, false, err
			}
			s.apply(resp.Frame{}, &rewrite.Decision{Action: rewrite.Local, Effect: rewrite.Reset})
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
				return true, false, nil // decided by the normal loop
			}
			s.rm.command(rewrite.NoEffect)               // refused by the server: changes no mode
			if err := sub.Add(out, f, nil); err != nil { // the server refuses it with its own text
				return false, false, err
			}
			s.start += n
		}
	}
}
