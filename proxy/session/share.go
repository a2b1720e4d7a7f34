package session

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// A client's fair share of a shared upstream connection: package limits'
// Share decides (the size of a client's parts, whether it is heavy), the
// session acts on it here: it ends a part that is full (flush), moves an
// isolated client's commands to connections of its own (ownPipe: opened,
// fenced and registered like a WATCH pin, upstream.IsolatedPipe), counts
// and logs an isolation, and closes those connections when the client
// comes back.

// NewMetrics creates the data path's collectors (package observe's
// Metrics) and registers them on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) (*observe.Metrics, error) {
	return observe.NewMetrics(reg, limits.IsoReasons)
}

// share is a session's use of the shared connections.
type share struct {
	limits.Share
	own []ownConn // while isolated: its connection to each upstream used
}

// ownConn is an isolated client's connection to one upstream.
type ownConn struct {
	up *upstream.Upstream
	p  *pipe.Pipe
}

// isolate moves the client to connections of its own, or keeps it there
// for another Options.IsolateFor when it is already.
func (s *session) isolate(reason string) {
	if s.sh.Isolate(time.Now(), s.srv.Cfg.IsolateFor) {
		s.srv.Met.Isolated.WithLabelValues(reason).Inc()
		s.srv.Met.IsolatedNow.Inc()
		s.log.Info("client isolated on a connection of its own", zap.String("reason", reason),
			zap.Duration("for_at_least", s.srv.Cfg.IsolateFor))
	}
}

// shareRound ends the client's isolation when IsolateFor has passed since
// it last was heavy. It runs at the start of a round, when none of its
// commands is in flight.
func (s *session) shareRound() {
	if !s.sh.Due(time.Now()) || s.tracks() { // tracking.go: its connections track
		return
	}
	s.endShare()
	s.log.Debug("client back on the shared connections")
}

// endShare closes the client's own connections and ends its isolation:
// when it comes back, and when the session ends.
func (s *session) endShare() {
	for _, oc := range s.sh.own {
		oc.p.Close()
	}
	clear(s.sh.own)
	s.sh.own = s.sh.own[:0]
	if s.sh.Rejoin() {
		s.srv.Met.IsolatedNow.Dec()
	}
}

// ownPipe returns the isolated client's connection to u, opening it when
// needed; nil when it cannot be opened (the upstream is unavailable).
func (s *session) ownPipe(u *upstream.Upstream) *pipe.Pipe {
	for i, oc := range s.sh.own {
		if oc.up != u {
			continue
		}
		if u.Serves(oc.p) {
			return oc.p
		}
		oc.p.Close()
		s.sh.own = append(s.sh.own[:i], s.sh.own[i+1:]...)
		break
	}
	c, err := s.conn(u, upstream.Request{Kind: upstream.KindIsolated, Proto: s.proto()})
	p := c.P
	if err != nil {
		s.log.Warn("isolated upstream connection failed", zap.Error(err))
		return nil
	}
	if !s.trackOwn(u, p) { // tracking.go: it tracks as the client asked
		p.Close()
		return nil
	}
	s.sh.own = append(s.sh.own, ownConn{up: u, p: p})
	return p
}

// closeOwn closes an isolated client's own connections, which speak the
// protocol they were opened in: the next command opens them anew (after a
// HELLO that switched the protocol). The client stays isolated.
func (s *session) closeOwn() {
	for _, oc := range s.sh.own {
		oc.p.Close()
	}
	clear(s.sh.own)
	s.sh.own = s.sh.own[:0]
}

// shareBefore readies the share for a forwarded command of size bytes
// (count commands: a transaction's whole unit) bound for a shared
// connection: it isolates the client when the command is heavy, and ends
// the current part (flush) when it holds the window's worth of the
// client's commands already. It reports whether the command now goes on
// the client's own connection.
func (s *session) shareBefore(size, count int) (own bool) {
	isolated := s.sh.Isolated()
	if reason := s.sh.Heavy(size, count); reason != "" {
		s.isolate(reason) // heavy on its own connection too: it stays
		if !isolated {
			return true
		}
	}
	if isolated {
		// Its own connection takes parts of ShareCommands too, so the reply
		// cap is checked between them: over it, the rest is never sent.
		for i := range s.seg.Parts {
			if pt := &s.seg.Parts[i]; pt.Own && pt.B.N > 0 && pt.B.N+count > s.sh.Commands {
				s.flush()
				break
			}
		}
		return true
	}
	for i := range s.seg.Parts {
		if pt := &s.seg.Parts[i]; !pt.Ded && pt.B.N+count > s.sh.Window() {
			s.sh.Full()
			s.flush() // the part is full: its replies first, others' batches between
			return s.sh.Isolated()
		}
	}
	return false
}

// shareAfter judges a segment's parts once their replies are in
// (limits.Share.After), on a shared connection or the client's own.
func (s *session) shareAfter() {
	for i := range s.seg.Parts {
		pt := &s.seg.Parts[i]
		if pt.B.N == 0 || (pt.Ded && !pt.Own) {
			continue
		}
		if reason := s.sh.After(pt.B.N, int64(len(pt.B.Replies)), pt.B.Over, pt.Own); reason != "" {
			s.isolate(reason)
		}
	}
}

// shareWrite judges a write of replies to the client that took took.
func (s *session) shareWrite(took time.Duration) {
	if reason := limits.SlowReader(took); reason != "" {
		s.isolate(reason)
	}
}
