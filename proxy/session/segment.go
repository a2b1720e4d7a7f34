package session

import (
	"bytes"
	"errors"
	"time"

	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// A segment is the part of a client batch sent before any of its replies
// are awaited: one batch per upstream connection it uses (a part). A
// batch whose commands all go to one shared connection is one part; a
// pipeline whose commands route to several upstreams has one part per
// upstream, sent concurrently, and the replies are put back in the
// client's order. A blocking command or a WATCH pin (a dedicated
// connection) is a segment of its own: the previous segment is sent and
// answered first, so commands execute in the order the client sent them.

// segment is the session's current segment and the round's replies.
type segment struct {
	parts   []segPart         // one batch per upstream connection
	cur     int               // the part the command being added goes to
	spare   []*pipe.Batch     // batches kept for reuse
	bufs    plan.Bufs         // backing arrays each command's values borrow (plan.go)
	slots   []rslot           // the current segment's replies, in command order
	local   []byte            // the current segment's local replies
	simple  bool              // one part, and every slot is its reply i, in order
	began   time.Time         // when the current batch was framed
	kind    observe.BatchKind // the batch's kind, for the latency histogram
	closing bool              // close after writing the current batch
	over    bool              // the reply cap was hit: close without writing
	silent  bool              // close without writing (authlimit.go)
	// execLoad is the SCRIPT LOAD fan-out of the segment's EXEC, sent
	// once its reply is in (transaction.go).
	execLoad *execLoad
}

// segPart is the part of the current segment bound for one connection.
type segPart struct {
	up   *upstream.Upstream
	p    *pipe.Pipe
	ded  bool // p is the client's own connection
	own  bool // p is an isolated client's own connection (share.go), read as a shared one
	b    *pipe.Batch
	sent bool // b was queued on p (else it was answered with an error)
}

// target makes p's part the current one (s.cur), adding it when the
// segment has none for p, and sending the segment built so far first when
// a dedicated connection would share a segment with another connection.
func (s *session) target(u *upstream.Upstream, p *pipe.Pipe, dedicated, own bool) {
	s.cur = s.partFor(u, p, dedicated, own)
}

// partFor returns the index of p's part, adding it (after flushing when
// needed, see target).
func (s *session) partFor(u *upstream.Upstream, p *pipe.Pipe, dedicated, own bool) int {
	for i := range s.parts {
		if s.parts[i].p == p {
			return i
		}
	}
	if len(s.parts) > 0 && (dedicated || s.parts[0].ded) {
		s.flush()
	}
	if len(s.parts) > 0 {
		s.simple = false
	}
	s.parts = append(s.parts, segPart{up: u, p: p, ded: dedicated, own: own, b: s.newBatch()})
	return len(s.parts) - 1
}

// newBatch returns an empty batch, reused when one is spare.
func (s *session) newBatch() *pipe.Batch {
	if n := len(s.spare); n > 0 {
		b := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return b
	}
	b := pipe.NewBatch()
	b.Acct.Budget = s.srv.Mem
	return b
}

// flush sends every part of the current segment, waits for their replies,
// and moves every reply of the segment, in order, to the output.
func (s *session) flush() {
	budget := int(max(s.srv.Cfg.MaxReplyBytes-int64(len(s.c.Out)+len(s.local)), 0))
	if BeforeSend != nil {
		BeforeSend(len(s.adm.states) > 0)
	}
	for i := range s.parts {
		pt := &s.parts[i]
		if pt.b.N == 0 {
			continue
		}
		if msg := s.leaseLapsed(pt.up); msg != nil {
			pt.b.Fill(msg) // hold.go: nothing of it was sent
			continue
		}
		pt.b.Max = budget
		if pt.up.Acks() {
			pt.p = pt.up.AckBatch(pt.b, pt.p, s.proto(), pt.ded) // upstream/ack.go: perhaps the probe connection
		}
		err := pt.p.Send(pt.b)
		if err != nil && pt.own && errors.Is(err, pipe.ErrIdleClosed) {
			// Nothing was written: the isolated client's own connection
			// was closed while idle (share.go). Send on a new one.
			if np := s.ownPipe(pt.up); np != nil {
				pt.p = np
				err = np.Send(pt.b)
			}
		}
		if err != nil && !pt.ded && (errors.Is(err, pipe.ErrIdleClosed) || pt.up.Sentinel()) {
			// Nothing was written: the server had closed the idle
			// connection, or a Sentinel upstream's broke. Send on its
			// replacement once it is up (upstream/failover.go: a new primary).
			np := pt.up.AwaitShared(s.srv.Ctx, s.id, s.proto(), pt.p)
			if !pt.up.Sentinel() {
				np = pt.up.Replaced(s.srv.Ctx, s.id, s.proto(), pt.p)
			}
			if np != nil {
				pt.p = np
				err = np.Send(pt.b)
			}
		}
		if err != nil {
			pt.b.Fill(pt.up.Unavailable())
			continue
		}
		pt.sent = true
	}
	for i := range s.parts {
		pt := &s.parts[i]
		if !pt.sent {
			continue
		}
		if pt.ded && !pt.own {
			blocking := pt.p == s.blocker
			if blocking {
				s.publish(s.began) // CLIENT LIST shows it blocked (flag b)
				s.listing.BlockGen.Add(1)
			}
			s.listing.Blocked.Store(blocking)
			s.waitDedicated(pt.b, pt.p)
			s.listing.Blocked.Store(false)
		} else {
			pt.p.Await(pt.b)
		}
		s.over = s.over || pt.b.Over
	}
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

// emit moves the segment's replies to the output in command order.
func (s *session) emit() {
	if s.over || int64(len(s.c.Out)+len(s.local)) > s.srv.Cfg.MaxReplyBytes {
		s.over = true
	} else if s.simple && len(s.c.Out) == 0 && len(s.parts) == 1 && len(s.slots) == s.parts[0].b.N {
		b := s.parts[0].b
		if s.obs.Audits() {
			// Slot i is reply i: the records note their replies' kinds
			// from the batch, which then becomes the output as it is.
			for i := range s.slots {
				if sl := &s.slots[i]; sl.audit >= 0 {
					s.obs.Reply(sl.audit, b.Reply(i), upName(sl.target))
				}
			}
		}
		// No copy: the replies are the output, and so is what they hold
		// of the budget.
		b.Replies = s.c.Adopt(b.Replies, b.Acct.Held)
		b.Acct.Held = 0
	} else {
		for i := range s.slots {
			sl := &s.slots[i]
			var r []byte
			if sl.local {
				r = s.local[sl.lo:sl.hi]
			} else {
				r = s.parts[sl.part].b.Reply(sl.idx)
				if sl.patch != nil {
					if p, err := rewrite.PatchScriptExists(r, sl.patch, s.v.Pol.Map); err == nil {
						r = p
					}
				}
			}
			if sl.audit >= 0 {
				s.obs.Reply(sl.audit, r, upName(sl.target))
			}
			if sl.drop { // CLIENT REPLY OFF or SKIP (clientreply.go)
				if !sl.local && s.parts[sl.part].b.Lost && bytes.HasSuffix(r, lostSuffix) {
					s.closing = true // the outcome is unknown: as a lost server connection
				}
				continue
			}
			s.c.Out = append(s.c.Out, r...)
		}
		s.c.HoldOutput() // package conn: the batches' bytes go below
	}
	for i := range s.parts {
		s.releaseReplies(s.parts[i].b) // budget.go
		s.parts[i].b.Reset()
		s.spare = append(s.spare, s.parts[i].b)
	}
	clear(s.parts)
	s.parts = s.parts[:0]
	s.cur = 0
	s.slots = s.slots[:0]
	s.local = s.local[:0]
	s.simple = true
}

// waitDedicated waits for a batch on a dedicated connection (which may
// block for long) while watching the client: if it goes away, the dedicated
// connection is closed so a blocked command does not outlive its client.
// Bytes the client sends meanwhile are kept for the next round.
func (s *session) waitDedicated(b *pipe.Batch, p *pipe.Pipe) {
	for {
		if s.c.Full() {
			<-b.Done // no room left to read into: wait without watching
			return
		}
		s.c.ReadAsync() // package conn
		select {
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
