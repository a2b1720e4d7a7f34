package session

import (
	"errors"
	"time"

	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/segment"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/shamap"
)

// The round's segments (package segment keeps one and orders its replies):
// the session adds each command to the current segment (forward.go, the
// transaction's EXEC, local replies), sends it (flush) when a reply must
// be in before what follows (a dedicated connection, a full share, the
// round's end), and writes the round's replies in one write.

// roundState is what the session holds for the round it serves.
type roundState struct {
	seg     segment.Segment   // the current segment
	bufs    plan.Bufs         // backing arrays each command's values borrow (plan.go)
	began   time.Time         // when the current batch was framed
	kind    observe.BatchKind // the batch's kind, for the latency histogram
	closing bool              // close after writing the current batch
	over    bool              // the reply cap was hit: close without writing
	silent  bool              // close without writing (authlimit.go)
	// execLoad is the SCRIPT LOAD fan-out of the segment's EXEC, sent
	// once its reply is in (transaction.go).
	execLoad *execLoad
}

// inSegment carries a command in normal service (the carrier of
// command.go): in the round's segment, its reply in its slot.
type inSegment struct{ s *session }

// start adds nothing to the plan's inputs.
func (w *inSegment) start(*command) error { return nil }

// flushHeld sends the segment built so far before a held command waits.
func (w *inSegment) flushHeld() error {
	w.s.flush()
	return nil
}

// route keeps a CLIENT CACHING for the next command's connection
// (tracking.go).
func (w *inSegment) route(c *command) (done bool, err error) {
	return w.s.trackCaching(c), nil
}

// answer adds the proxy's reply to the segment, and the SCRIPT LOAD
// fan-out of a verb body (scriptload.go).
func (w *inSegment) answer(c *command) error {
	d := &c.sp.Decision
	w.s.seg.AddLocal(d.Reply, c.audit, c.drop)
	w.s.alsoLoad(c.f, d, nil, false)
	return nil
}

// settle leaves the command's admission counted until the round's
// replies are in (session.go's round).
func (w *inSegment) settle(err error) error { return err }

// target makes p's part the current one (s.seg.Cur), adding it when the
// segment has none for p, and sending the segment built so far first when
// a dedicated connection would share a segment with another connection.
func (s *session) target(u *upstream.Upstream, p *pipe.Pipe, dedicated, own bool) {
	s.seg.Cur = s.partFor(u, p, dedicated, own)
}

// partFor returns the index of p's part, adding it (after flushing when
// needed, see target).
func (s *session) partFor(u *upstream.Upstream, p *pipe.Pipe, dedicated, own bool) int {
	if i := s.seg.Find(p); i >= 0 {
		return i
	}
	if s.seg.Apart(dedicated) {
		s.flush()
	}
	return s.seg.Add(u, p, dedicated, own)
}

// flush sends every part of the current segment, waits for their replies,
// and moves every reply of the segment, in order, to the output.
func (s *session) flush() {
	budget := int(max(s.srv.Cfg.MaxReplyBytes-int64(len(s.c.Out)+len(s.seg.Local)), 0))
	if h := s.srv.Hooks.BeforeSend; h != nil {
		h(len(s.adm.states) > 0)
	}
	for i := range s.seg.Parts {
		if pt := &s.seg.Parts[i]; pt.B.N > 0 {
			s.sendPart(pt, budget)
		}
	}
	s.awaitParts()
	if s.srv.Acking {
		s.settleAcks() // acks.go
	}
	s.shareAfter()     // share.go
	s.captureReplies() // observe.go
	if s.execLoad != nil {
		s.execLoad.read(s) // transaction.go: the SCRIPT LOADs EXEC ran
	}
	s.emit()
	if s.unpin {
		s.closePinned()
	}
	s.tx.SameSegment = false
}

// sendPart sends one part of the segment, its replies bounded by budget
// bytes, and marks it sent; a part that could not be sent, or must not be
// (the lease lapsed), has its error in every reply instead.
func (s *session) sendPart(pt *segment.Part, budget int) {
	if msg := s.leaseLapsed(pt.Up); msg != nil {
		pt.B.Fill(msg) // hold.go: nothing of it was sent
		return
	}
	if h := s.srv.Hooks.AfterSendCheck; h != nil && len(s.adm.states) > 0 {
		h()
	}
	pt.B.Max = budget
	if pt.Up.Acks() {
		pt.P = pt.Up.AckBatch(pt.B, pt.P, s.proto(), pt.Ded) // upstream/ack.go: perhaps the probe connection
	}
	err := pt.P.Send(pt.B)
	if err != nil && pt.Own && errors.Is(err, pipe.ErrUnsent) {
		// Nothing was written: the isolated client's own connection
		// was closed (while idle, share.go) or broke. Send on a new one.
		err = s.resend(pt, s.ownPipe(pt.Up), err)
	}
	if err != nil && !errors.Is(err, errResendRefused) && !pt.Ded && (errors.Is(err, pipe.ErrUnsent) || pt.Up.Sentinel()) {
		// Nothing was written: the shared connection was broken (the
		// server closed it while idle, found so by Send or by the idle
		// watch before it; or it broke under other clients' commands).
		// Send on its replacement once it is up (upstream/failover.go:
		// a Sentinel upstream's may be a new primary).
		kind := upstream.KindReplaced
		if pt.Up.Sentinel() {
			kind = upstream.KindAwaitShared
		}
		err = s.resend(pt, s.pipeOf(pt.Up, kind, s.proto(), pt.P), err)
	}
	switch {
	case errors.Is(err, errResendRefused):
		// filled by resendCheck: nothing of it was sent
	case err != nil:
		pt.B.Fill(pt.Up.Unavailable())
	default:
		pt.Sent = true
	}
}

// resend sends a part again on np, a new connection, once resendCheck
// allows it; with no new connection (np nil) the first send's error err
// stands.
func (s *session) resend(pt *segment.Part, np *pipe.Pipe, err error) error {
	if np == nil {
		return err
	}
	pt.P = np
	if err := s.resendCheck(pt); err != nil {
		return err
	}
	return np.Send(pt.B)
}

// awaitParts waits for the replies of every part sent; a part on a
// dedicated connection (a blocking command's, a WATCH pin's) is waited for
// while the client is watched (waitDedicated).
func (s *session) awaitParts() {
	for i := range s.seg.Parts {
		pt := &s.seg.Parts[i]
		if !pt.Sent {
			continue
		}
		if pt.Ded && !pt.Own {
			blocking := pt.P == s.blocker
			if blocking {
				s.publish(s.began) // CLIENT LIST shows it blocked (flag b)
				s.listing.BlockGen.Add(1)
				s.writeAhead()
			}
			s.listing.Blocked.Store(blocking)
			s.waitDedicated(pt.B, pt.P)
			s.listing.Blocked.Store(false)
		} else {
			pt.P.Await(pt.B)
		}
		s.over = s.over || pt.B.Over
	}
}

// writeAhead writes the replies the round has so far to the client before
// a blocking command waits, as a server writes them before the command
// blocks: a client that pipelines a push and a blocking pop reads the
// push's reply while the pop waits (and may unblock it only once it has
// that reply). A failed write closes the client after the round.
func (s *session) writeAhead() {
	if len(s.c.Out) == 0 || s.over || s.silent {
		return
	}
	if err := s.write(); err != nil {
		s.closing = true
	}
}

// errResendRefused: resendCheck refused a part's resend; its batch holds
// the refusal.
var errResendRefused = errors.New("resend refused")

// resendCheck runs the send-time check (hold.go's leaseLapsed) again
// before a part is resent on a new connection: the wait for that
// connection (a dial, up to the dial timeout; a Sentinel upstream's new
// primary, up to failover_wait) may outlast the proxy's lease or see a
// new table. A refused part gets the error in every reply and
// errResendRefused: nothing of it was written, on either connection, so
// the client is told so and is never answered twice for one write.
func (s *session) resendCheck(pt *segment.Part) error {
	if h := s.srv.Hooks.BeforeResend; h != nil {
		h()
	}
	if msg := s.leaseLapsed(pt.Up); msg != nil {
		pt.B.Fill(msg)
		return errResendRefused
	}
	return nil
}

// emit moves the segment's replies to the output in command order
// (segment.Segment.Emit) and empties it, giving back what its batches held
// of the budget.
func (s *session) emit() {
	if !s.over {
		var m *shamap.Map // SCRIPT EXISTS replies are patched under the policy's map
		if s.v.Pol != nil {
			m = s.v.Pol.Map
		}
		over, closing := s.seg.Emit(s.c, &s.obs, m, s.srv.Cfg.MaxReplyBytes)
		s.over = over
		s.closing = s.closing || closing // a dropped reply's outcome is unknown: as a lost server connection
	}
	for i := range s.seg.Parts {
		s.releaseReplies(s.seg.Parts[i].B) // budget.go
	}
	s.seg.Reset()
}

// waitDedicated waits for a batch on a dedicated connection (which may
// block for long) while watching the client: if it goes away, the dedicated
// connection is closed so a blocked command does not outlive its client.
// Bytes the client sends meanwhile are kept for the next round.
//
// With the control table on, it also watches the table: once a table in
// force changed the queue of a command admitted this round (a move held
// it), the command is given up after ControlOptions.Hold (giveUp): the
// connection is closed, so the server drops the blocked command, and the
// client gets the connection's error. Such a command may still reach the
// queue's old owner, so the proxy does not acknowledge the hold until it is
// done (control.go); a client blocked with no timeout on the moving queue
// would otherwise stop the move. A command blocked on any other queue is
// never given up.
func (s *session) waitDedicated(b *pipe.Batch, p *pipe.Pipe) {
	var changed <-chan struct{}
	var giveUp <-chan time.Time
	if c := s.srv.Ctl; c != nil && len(s.adm.states) > 0 {
		changed = s.v.Ctl.Changed()
	}
	for {
		if s.c.Full() {
			<-b.Done // no room left to read into: wait without watching
			return
		}
		s.c.ReadAsync() // package conn
		select {
		case <-changed:
			c := s.srv.Ctl
			cur := c.Current()
			changed = cur.Changed()
			if giveUp == nil && s.admittedMoved(cur) {
				hold, _ := c.HoldLimits()
				t := time.NewTimer(hold)
				defer t.Stop()
				giveUp, changed = t.C, nil
			}
			continue // the client's read stays out
		case <-giveUp:
			giveUp = nil
			cur := s.srv.Ctl.Current()
			if !s.admittedMoved(cur) {
				changed = cur.Changed() // released where it was (an abort): keep waiting
				continue
			}
			p.Close() // the batch gets the connection's error: b.Done
			continue
		case <-b.Done:
			if err := s.c.StopRead(); err != nil {
				s.closing = true
			}
			return
		case r := <-s.c.Reads():
			if s.c.ReadDone(r) == nil {
				continue // the client sent more: keep it, keep watching
			}
			p.Close() // the client is gone: unblock and drop the command
			s.closing = true
			<-b.Done
			return
		}
	}
}
