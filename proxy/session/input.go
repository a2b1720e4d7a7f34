package session

import (
	"errors"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/resp"
)

// A session's client input: the read buffer, grown for what a command
// needs and shrunk back (InitialReadBuf, keptReadBuf), its bytes taken
// from the memory budget (budget.go).

// input is the session's client input.
type input struct {
	fr         resp.Framer
	buf        []byte // read buffer; unread bytes are buf[start:end]
	start, end int
	readFull   bool // the last read filled the buffer: the client sends more than it holds
	smallReads int  // reads in a row that used under a quarter of the buffer
	need       int  // the length the incomplete command at buf[start:] is known to need (0: unknown)
	taken      int  // the length of the command Next took last (subscribe.go)
	rd         clientRead
}

// clientRead is a read of the client's connection in a goroutine of its
// own, for a session that waits for its client and for something else at
// once: subscribe mode (the server's pushes, a leg's failure) and a blocking
// command on a connection of the client's own (its reply). While one is out,
// buf[end:] is the reader's, and the session neither frames nor moves the
// buffer.
type clientRead struct {
	out  bool
	done chan readResult
}

// readResult is what a client read got.
type readResult struct {
	n   int
	err error
}

// fill reads more client bytes, making room first; in subscribe mode it
// waits for the subscriber's events too (subscribe.go's subFill).
func (s *session) fill() error {
	if s.sub != nil {
		return s.subFill()
	}
	if err := s.room(); err != nil {
		return err
	}
	s.readDeadline() // authlimit.go
	if s.srv.Closing.Load() {
		return ErrServerClosed
	}
	n, err := s.nc.Read(s.buf[s.end:])
	s.srv.Met.BytesIn.Add(float64(n))
	s.readFull = n > 0 && s.end+n == len(s.buf)
	if n < len(s.buf)/4 {
		s.smallReads++
	} else {
		s.smallReads = 0
	}
	s.end += n
	if n > 0 {
		return nil // bytes to frame; an error shows again on the next read
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && s.authPending() && !time.Now().Before(s.authBy) {
		s.authTimedOut()
	}
	return err
}

// readAsync starts a client read into buf[end:] (see clientRead), unless
// one is out already; readDone takes its result.
func (s *session) readAsync() {
	if s.rd.out {
		return
	}
	if s.rd.done == nil {
		s.rd.done = make(chan readResult, 1)
	}
	s.rd.out = true
	buf, nc := s.buf[s.end:], s.nc
	go func() {
		n, err := nc.Read(buf)
		s.rd.done <- readResult{n, err}
	}()
}

// readDone takes a client read's result: its bytes join the buffer. It
// returns the read's error only when it brought no bytes (an error shows
// again on the next read).
func (s *session) readDone(r readResult) error {
	s.rd.out = false
	s.end += r.n
	s.srv.Met.BytesIn.Add(float64(r.n))
	if r.n > 0 {
		return nil
	}
	return r.err
}

// stopRead ends an outstanding client read, keeping what it brought; an
// error means the client is gone.
func (s *session) stopRead() error {
	if !s.rd.out {
		return nil
	}
	_ = s.nc.SetReadDeadline(time.Now())
	err := s.readDone(<-s.rd.done)
	_ = s.nc.SetReadDeadline(time.Time{})
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}

// room makes room in the read buffer for more client bytes: it moves the
// unread bytes to the front, or grows the buffer (up to MaxQueryBuffer),
// taking the bytes from the memory budget (budget.go), and waits for them
// when the budget is short: the client is not read from meanwhile.
func (s *session) room() error {
	if len(s.buf) > keptReadBuf && s.end-s.start <= InitialReadBuf && s.need <= InitialReadBuf {
		// Shrink back after a big command (what follows it fits the
		// initial buffer), releasing its bytes to the budget.
		if _, err := s.resizeInput(InitialReadBuf, true); err != nil {
			return err
		}
	}
	if s.start == s.end {
		s.start, s.end = 0, 0
		// Shrink back when the client's reads have become small next to
		// a buffer grown for its pipelines.
		if len(s.buf) > InitialReadBuf && s.smallReads >= shrinkAfter {
			if _, err := s.resizeInput(InitialReadBuf, true); err != nil {
				return err
			}
		}
	}
	if s.readFull && len(s.buf) < keptReadBuf && int64(len(s.buf)) < s.srv.Cfg.MaxQueryBuffer {
		// The last read filled the buffer: the client pipelines more than
		// it holds. Double it so the next pipeline arrives in one read
		// (unless the budget is short: the pipeline then takes two).
		s.readFull = false
		if _, err := s.resizeInput(int(min(int64(2*len(s.buf)), s.srv.Cfg.MaxQueryBuffer)), false); err != nil {
			return err
		}
	}
	if s.end == len(s.buf) {
		if s.start > 0 {
			s.end = copy(s.buf, s.buf[s.start:s.end])
			s.start = 0
		} else {
			if int64(len(s.buf)) >= s.srv.Cfg.MaxQueryBuffer {
				s.srv.Met.Rejected.WithLabelValues("query_buffer").Inc()
				s.log.Warn("closing client over the query buffer limit", zap.Int("bytes", len(s.buf)))
				return errClose
			}
			// Grow to what the incomplete command is known to need (the
			// budget holds its size: one allocation, no copies on the
			// way), else geometrically as bytes arrive (a header line,
			// at most MaxInline).
			size := 2 * len(s.buf)
			if s.need > len(s.buf) {
				size = s.need
			}
			size = int(min(int64(size), s.srv.Cfg.MaxQueryBuffer))
			if _, err := s.resizeInput(size, true); err != nil {
				return err
			}
		}
	}
	return nil
}
