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
}

// fill reads more client bytes, making room first.
func (s *session) fill() error {
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
