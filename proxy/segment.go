package proxy

import (
	"errors"
	"os"
	"time"

	"github.com/emqproxy/emqproxy/rewrite"
)

// A segment is the part of a client batch that goes to one upstream
// connection. A batch whose commands all go to the shared connection is
// one segment; a blocking command or a WATCH pin in the middle starts a new
// one, and the previous segment is sent and answered first, so commands
// execute in the order the client sent them.

// target makes p the current segment's connection, sending the segment
// built so far when it was for another connection.
func (s *session) target(u *Upstream, p *pipe, dedicated bool) {
	if s.segPipe != p && s.seg.n > 0 {
		s.flush()
	}
	s.segUp, s.segPipe, s.segDedicated = u, p, dedicated
}

// flush sends the current segment, waits for its replies, and moves every
// reply of the segment, in order, to the output.
func (s *session) flush() {
	seg := s.seg
	if seg.n > 0 {
		seg.max = int(max(s.srv.opts.MaxReplyBytes-int64(len(s.out)+len(s.local)), 0))
		if err := s.segPipe.send(seg); err != nil {
			seg.fill(s.segUp.unavailable())
		} else if !s.segDedicated {
			<-seg.done
		} else {
			s.waitDedicated(seg)
		}
		s.over = s.over || seg.over
	}
	s.emit()
	if s.unpin {
		s.closePinned()
	}
	s.tx.sameSegment = false
}

// emit moves the segment's replies to the output in command order.
func (s *session) emit() {
	seg := s.seg
	if s.over || int64(len(s.out)+len(s.local)) > s.srv.opts.MaxReplyBytes {
		s.over = true
	} else if s.simple && len(s.out) == 0 && len(s.slots) == seg.n && !s.haveAudits() {
		s.out, seg.replies = seg.replies, s.out[:0] // no copy: the replies are the output
	} else {
		for i := range s.slots {
			sl := &s.slots[i]
			var r []byte
			if sl.local {
				r = s.local[sl.lo:sl.hi]
			} else {
				r = seg.reply(sl.idx)
				if sl.patch != nil {
					if p, err := rewrite.PatchScriptExists(r, sl.patch, s.pol.Map); err == nil {
						r = p
					}
				}
			}
			if sl.audit >= 0 {
				s.audits[sl.audit].setReply(r, sl.target)
			}
			s.out = append(s.out, r...)
		}
	}
	seg.reset()
	s.slots = s.slots[:0]
	s.local = s.local[:0]
	s.simple = true
}

// waitDedicated waits for a batch on a dedicated connection (which may
// block for long) while watching the client: if it goes away, the dedicated
// connection is closed so a blocked command does not outlive its client.
// Bytes the client sends meanwhile are kept for the next round.
func (s *session) waitDedicated(b *batch) {
	for {
		if s.end == len(s.buf) {
			<-b.done // no room left to read into: wait without watching
			return
		}
		got := make(chan error, 1)
		go func() {
			n, err := s.nc.Read(s.buf[s.end:])
			s.end += n
			got <- err
		}()
		select {
		case <-b.done:
			_ = s.nc.SetReadDeadline(time.Now()) // stop the watcher
			err := <-got
			_ = s.nc.SetReadDeadline(time.Time{})
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				s.closing = true
			}
			return
		case err := <-got:
			if err == nil {
				continue // the client sent more: keep it, keep watching
			}
			s.segPipe.close() // the client is gone: unblock and drop the command
			s.closing = true
			<-b.done
			return
		}
	}
}
