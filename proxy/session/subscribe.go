package session

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/tracking"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Subscribe mode (package pubsub says what the proxy does in it, and does
// it: a pubsub.Mode, set in s.sub). The session keeps its one loop, which
// serves the Mode's round (subRound) and waits for the client's bytes and
// the subscriber's events (subFill); the client's input, framed for the
// Mode by Next; its CLIENT REPLY mode; and the plan of a bridged RESP3
// client's command (bridge.go). A session is a pubsub.Session.
//
// As with the server, Options.IdleTimeout does not apply to a subscribed
// client.

var _ pubsub.Session = (*session)(nil)

// startSubscribe handles a subscribe command decided outside subscribe
// mode: the commands before it are answered first, then the session's
// round ends and its loop serves subscribe mode (s.sub is set). When the
// upstream connection cannot be opened the command gets the unavailable
// error.
func (s *session) startSubscribe(u *upstream.Upstream, c *command) {
	f, audit := c.f, c.audit
	s.flush()
	own, err := s.conn(u, upstream.Request{Kind: upstream.KindOwn, Proto: s.proto()}) // upstream/owned.go
	dl := own.Dialed
	if err != nil {
		s.log.Warn("subscriber upstream connection failed", zap.Error(err))
		s.seg.AddLocal(u.Unavailable(), audit, c.drop)
		return
	}
	sub := pubsub.New(s.client(), u, dl, f.Raw, int(min(s.srv.Cfg.MaxReplyBytes, int64(^uint(0)>>1))), s.proto() == 3)
	if on, _ := tracking.OnOff(f.Args); on {
		sub.Tracking, sub.TrackRaw = true, append([]byte(nil), f.Raw...)
	}
	sub.Muted.Store(c.drop)
	sub.SkipFirst = c.drop && !s.rm.Muted()
	s.sub = pubsub.NewMode(sub, s, pubsub.Env{Ctx: s.srv.Ctx, ID: s.id, Redir: s.srv.Redir, Transport: s.srv.Transport})
}

// client is what subscribe mode's goroutines and a tracking redirect's
// relay need of the session (package pubsub).
func (s *session) client() *pubsub.Client {
	return &pubsub.Client{Conn: s.c.Net(), Log: s.log, Mem: s.srv.Mem, Met: s.srv.Met,
		WriteTimeout: s.srv.Cfg.WriteTimeout, Subs: &s.listing.Subs}
}

// subRound is subscribe mode's round (pubsub.Mode.Round): when the client
// left subscribe mode, s.sub is nil again and the loop goes on in normal
// service with the bytes still buffered. An error ends the session.
func (s *session) subRound() (err error) {
	defer s.recoverSub(&err)
	ended, err := s.sub.Round()
	if ended {
		s.sub = nil
		return err
	}
	if err == nil && s.srv.Closing.Load() {
		return ErrServerClosed
	}
	return err
}

// subFill waits in subscribe mode until the client sent more (nil), the
// client left subscribe mode (nil, s.sub is nil), or the session ends (an
// error): the client read goes on while the server's side reports a hint
// that the client may have left, or the end of a relay.
func (s *session) subFill() (err error) {
	sub := s.sub
	defer s.recoverSub(&err)
	if !s.c.Reading() {
		if err := s.room(); err != nil { // budget.go
			return err
		}
		s.c.ReadAsync()
	}
	for {
		select {
		case r := <-s.c.Reads():
			err := s.c.ReadDone(r)
			if errors.Is(err, os.ErrDeadlineExceeded) && !s.srv.Closing.Load() {
				// A deadline set before subscribe mode (IdleTimeout does
				// not apply to a subscribed client).
				_ = s.c.Net().SetReadDeadline(time.Time{})
				return nil
			}
			return err
		case <-sub.Hint:
			subscribed, err := sub.Check(false)
			if err != nil {
				return err
			}
			if !subscribed {
				if err := s.c.StopRead(); err != nil {
					return err
				}
				s.endSub(false)
				return nil
			}
		case <-sub.Ended:
			return sub.Failure()
		case <-sub.LegDown:
			return sub.LegFailure() // package pubsub's legs.go
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

// endSub ends subscribe mode (pubsub.Mode.End): the session is back in
// normal service.
func (s *session) endSub(abort bool) {
	sub := s.sub
	s.sub = nil
	s.st.Subscribed = false
	sub.End(abort)
}

// Begin starts serving what the client's last read brought in subscribe
// mode (pubsub.Session).
func (s *session) Begin() {
	s.c.Reset()
	s.loadView()         // plan.go: once per read, as in normal service
	s.began = time.Now() // the audit records' latency_us: from this read
}

// Next frames the next command in the client's buffer for subscribe mode
// (pubsub.Session): a framed one is taken, and is CLIENT LIST's cmd; when
// none is complete, the audit records are written before the next read
// reuses the buffer.
func (s *session) Next() (resp.Frame, resp.Status, []byte) {
	f, status, errReply := s.c.Next()
	switch status {
	case resp.Incomplete:
		s.logAudits()
		s.publish(time.Now())
	case resp.Framed:
		s.listing.LastArgs = f.Args // CLIENT LIST's cmd (clients.View)
	}
	return f, status, errReply
}

// Unread puts back the command Next took last (pubsub.Session).
func (s *session) Unread() { s.c.Unread() }

// Dropped starts a command in the CLIENT REPLY mode (pubsub.Session).
func (s *session) Dropped(e rewrite.Effect) bool { return s.rm.Command(e) }

// Muted reports whether the CLIENT REPLY mode is OFF (pubsub.Session).
func (s *session) Muted() bool { return s.rm.Muted() }

// InMulti reports whether the client is in a transaction (pubsub.Session).
func (s *session) InMulti() bool { return s.st.InMulti }

// Reset applies RESET to the session in subscribe mode (pubsub.Session).
func (s *session) Reset() {
	s.apply(&rewrite.Decision{Action: rewrite.Local, Effect: rewrite.Reset})
}
