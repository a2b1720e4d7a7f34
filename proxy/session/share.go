package session

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// A client's fair share of a shared upstream connection.
//
// The batches of many clients go on one shared connection and are answered
// in the order they were written: while one client's commands are in
// flight, every batch written after them waits for their replies. One
// client that pipelines a thousand GETs of a 1 MiB value would hold the
// connection for a gigabyte of replies, and the node, which sees one
// client, would close the connection, and every client on it, over its
// output-buffer limit. So each client gets a share:
//
//  1. At most Options.ShareCommands of one client's commands are in flight
//     on a shared connection at once. A longer batch is sent in parts of
//     that many: the next part is written once the replies of the one
//     before are read, so other clients' batches go between them. A
//     client's parts start at ShareStart commands and double, up to
//     ShareCommands, while their replies stay small (on average under
//     ShareBytes/ShareCommands a command): the size of a reply is known
//     only once it is read, so a client whose replies are large has cost
//     the shared connection one small part before it is isolated, not
//     ShareCommands of its replies. A client over its reply cap
//     (Options.MaxReplyBytes) is closed at the end of the part that passed
//     it: the rest of its batch is never sent.
//     On its own connection (below) a client's commands go in parts of
//     ShareCommands too, so that past its reply cap the rest of its batch
//     is not sent there either.
//  2. A client that is heavy for a shared connection is isolated: its
//     commands go on a connection of its own to each upstream (opened,
//     fenced and registered like a WATCH pin, upstream/owned.go; a reply timeout
//     like a shared connection's), counted as
//     emqproxy_client_isolated_total{reason} and logged once. Heavy is:
//     - command_bytes: a command (or a transaction) larger than
//     Options.ShareBytes, known before it is sent;
//     - reply_bytes: one part whose replies passed Options.ShareBytes;
//     - pipeline: SharePipelineParts parts in a row that each filled
//     Options.ShareCommands, or a transaction longer than that;
//     - slow_reader: a write of replies to the client that took longer
//     than slowWrite (the client reads more slowly than it asks).
//     What a client still costs a shared connection before it is isolated
//     is therefore one part: ShareStart commands and their replies, or
//     ShareCommands once its replies have shown themselves small.
//  3. It comes back to the shared connections when Options.IsolateFor has
//     passed since it last did any of the above on its own connection (a
//     batch longer than ShareCommands, replies or a command over
//     ShareBytes, a slow write): its own connections are closed at the
//     start of its next round, when nothing of it is in flight.
//
// An isolated client's connections are the node's clients like a direct
// client's: the node's output-buffer limit closes that connection alone.
// WATCH pins, blocking commands and subscribe mode keep their own
// connections as before; the share concerns the shared connections only.

// SharePipelineParts is how many full parts in a row make a client deep
// pipelining (isolated for "pipeline").
const SharePipelineParts = 4

// ShareStart is the size of a client's first parts on a shared connection
// (the window grows from it: see above). Eight covers the batches of most
// clients, so the window's growth costs them nothing.
const ShareStart = 8

// slowWrite is the longest a write of replies to the client may block
// before the client counts as a slow reader. A client that reads promptly
// takes a 64 MiB reply in tens of milliseconds on loopback.
const slowWrite = 250 * time.Millisecond

// Isolation reasons, the label of emqproxy_client_isolated_total.
const (
	isoCommandBytes = "command_bytes"
	isoReplyBytes   = "reply_bytes"
	isoPipeline     = "pipeline"
	isoSlowReader   = "slow_reader"
	isoTracking     = "tracking" // RESP2 client-side caching (tracking.go)
)

// isoReasons are the reasons, for the metric's initial series.
var isoReasons = []string{isoCommandBytes, isoReplyBytes, isoPipeline, isoSlowReader, isoTracking}

// NewMetrics creates the data path's collectors (package observe's
// Metrics) and registers them on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) (*observe.Metrics, error) {
	return observe.NewMetrics(reg, isoReasons)
}

// share is a session's use of the shared connections.
type share struct {
	window int       // commands a part may hold now; 0: ShareStart (see above)
	full   int       // parts in a row that filled the window
	until  time.Time // isolated until then; zero: shares
	own    []ownConn // while isolated: its connection to each upstream used
}

// ownConn is an isolated client's connection to one upstream.
type ownConn struct {
	up *upstream.Upstream
	p  *pipe.Pipe
}

// isolated reports whether the client has connections of its own.
func (sh *share) isolated() bool { return !sh.until.IsZero() }

// isolate moves the client to connections of its own, or keeps it there
// for another Options.IsolateFor when it is already.
func (s *session) isolate(reason string) {
	now := time.Now()
	if !s.sh.isolated() {
		s.srv.Met.Isolated.WithLabelValues(reason).Inc()
		s.srv.Met.IsolatedNow.Inc()
		s.log.Info("client isolated on a connection of its own", zap.String("reason", reason),
			zap.Duration("for_at_least", s.srv.Cfg.IsolateFor))
	}
	s.sh.until = now.Add(s.srv.Cfg.IsolateFor)
	s.sh.full = 0
}

// shareRound ends the client's isolation when IsolateFor has passed since
// it last was heavy. It runs at the start of a round, when none of its
// commands is in flight.
func (s *session) shareRound() {
	if !s.sh.isolated() || time.Now().Before(s.sh.until) || s.tracks() { // tracking.go: its connections track
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
	if s.sh.isolated() {
		s.sh.until = time.Time{}
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
		if oc.p.Failed() == nil && u.Fenced() && u.Current(oc.p) {
			return oc.p
		}
		oc.p.Close()
		s.sh.own = append(s.sh.own[:i], s.sh.own[i+1:]...)
		break
	}
	p, err := u.IsolatedPipe(s.srv.Ctx, s.proto())
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
// the current part (flush) when it holds ShareCommands of the client's
// commands already. It reports whether the command now goes on the
// client's own connection.
func (s *session) shareBefore(size, count int) (own bool) {
	o := &s.srv.Cfg
	if s.sh.isolated() {
		switch {
		case int64(size) > o.ShareBytes:
			s.isolate(isoCommandBytes) // heavy on its own connection too: stays
		case count > o.ShareCommands:
			s.isolate(isoPipeline)
		}
		// Its own connection takes parts of ShareCommands too, so the reply
		// cap is checked between them: over it, the rest is never sent.
		for i := range s.parts {
			if pt := &s.parts[i]; pt.own && pt.b.N > 0 && pt.b.N+count > o.ShareCommands {
				s.flush()
				break
			}
		}
		return true
	}
	switch {
	case int64(size) > o.ShareBytes:
		s.isolate(isoCommandBytes)
		return true
	case count > o.ShareCommands:
		s.isolate(isoPipeline)
		return true
	}
	for i := range s.parts {
		if pt := &s.parts[i]; !pt.ded && pt.b.N+count > s.shareWindow() {
			s.sh.full++
			s.flush() // the part is full: its replies first, others' batches between
			return s.sh.isolated()
		}
	}
	return false
}

// shareWindow is how many of the client's commands a part may hold now.
func (s *session) shareWindow() int {
	if s.sh.window == 0 {
		return min(ShareStart, s.srv.Cfg.ShareCommands)
	}
	return s.sh.window
}

// shareAfter judges a segment's parts once their replies are in: a part
// on a shared connection whose replies passed ShareBytes isolates the
// client, and so do SharePipelineParts full parts in a row; a full part
// of small replies doubles the window. On the client's own connection the
// same keeps it isolated.
func (s *session) shareAfter() {
	o := &s.srv.Cfg
	for i := range s.parts {
		pt := &s.parts[i]
		if pt.b.N == 0 || (pt.ded && !pt.own) {
			continue
		}
		heavy := pt.b.Over || int64(len(pt.b.Replies)) > o.ShareBytes
		switch {
		case pt.own:
			if heavy || pt.b.N >= o.ShareCommands {
				s.isolate(isoReplyBytes) // still heavy: it stays
			}
		case heavy:
			s.isolate(isoReplyBytes)
		case s.sh.full >= SharePipelineParts:
			s.isolate(isoPipeline)
		case pt.b.N < s.shareWindow():
			s.sh.full = 0
		case int64(len(pt.b.Replies))*int64(o.ShareCommands) <= o.ShareBytes*int64(pt.b.N):
			s.sh.window = min(2*s.shareWindow(), o.ShareCommands) // small replies: a larger part
		}
	}
}

// shareWrite judges a write of replies to the client that took took.
func (s *session) shareWrite(took time.Duration) {
	if took > slowWrite {
		s.isolate(isoSlowReader)
	}
}
