package session

import (
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/clients"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Forwarding: the connection a planned command goes on (the shared pipe, a
// WATCH pin, a blocking command's connection: upstream/owned.go) and its bytes (the
// client's own, or a rewritten head and the client's tail).

// forward adds a forwarded command to the segment for its connection
// (forward), and to the capture.
func (w *inSegment) forward(c *command) error {
	w.s.forward(c)
	w.s.captureCommand(c.f, &c.sp.Decision, c.sp.Entry) // observe.go
	return nil
}

// forward adds a forwarded command to the segment for its connection.
func (s *session) forward(c *command) {
	f, d, audit := c.f, &c.sp.Decision, c.audit
	u := c.up(s)
	if d.Effect == rewrite.Subscribe {
		s.startSubscribe(u, c) // subscribe.go
		return
	}
	own := s.pinned == nil && d.Effect != rewrite.Watch && d.Effect != rewrite.Blocking && s.shareBefore(len(f.Raw), 1)
	if s.over {
		s.seg.AddLocal(nil, audit, c.drop) // past the reply cap: not sent, the client is closed (share.go)
		return
	}
	var p *pipe.Pipe
	var ded bool
	if own {
		p, ded = s.ownPipe(u), true // share.go: a heavy client's own connection
	} else {
		p, ded = s.pipeFor(u, d)
	}
	if p == nil {
		s.seg.AddLocal(u.Unavailable(), audit, c.drop)
		return
	}
	s.target(u, p, ded, own)
	b := s.seg.Parts[s.seg.Cur].B
	b.Encode(f, d)
	var patch [][]byte
	if d.Effect == rewrite.ScriptExists {
		patch = f.Args
	}
	s.seg.Forwarded(audit, u, c.drop, patch)
	if u.Acks() {
		s.noteWrite(b, f.Args, &c.sp) // acks.go
	}
	b.N++
	s.alsoLoad(f, d, u, !ded) // scriptload.go
}

// pipeFor chooses the connection a forwarded command goes on: the WATCH pin
// while there is one, a dedicated connection for WATCH and blocking
// commands, else the shared one. nil when it is unavailable.
func (s *session) pipeFor(u *upstream.Upstream, d *rewrite.Decision) (p *pipe.Pipe, dedicated bool) {
	switch {
	case s.pinned != nil:
		if !u.Fenced() { // the probe found the fence broken since the pin
			return nil, true
		}
		return s.pinned, true
	case d.Effect == rewrite.Watch:
		s.pinnedUp = u
		s.st.Watching = true
		return s.dedicated(u, &s.pinned), true
	case d.Effect == rewrite.Blocking:
		if s.blocker != nil && s.blockerUp != u {
			s.blocker.Close() // routed elsewhere now: a connection to the new upstream
			s.blocker = nil
		}
		s.blockerUp = u
		return s.blocking(u), true
	}
	p = s.pipeOf(u, upstream.KindShared, s.proto(), nil)
	if p == nil && s.proto() == 3 {
		// The RESP3 connections open for the first RESP3 client.
		p = s.pipeOf(u, upstream.KindReplaced, 3, nil)
	}
	if p == nil {
		p = s.pipeOf(u, upstream.KindAwaitShared, s.proto(), nil) // upstream/failover.go: its replacement, or a new primary
	}
	return p, false
}

// proto is the protocol the client speaks: 2 or 3.
func (s *session) proto() int {
	if s.st.Proto == 3 {
		return 3
	}
	return 2
}

// dedicated returns the client's own connection kept in *slot, opening it
// when needed; nil when it cannot be opened.
func (s *session) dedicated(u *upstream.Upstream, slot **pipe.Pipe) *pipe.Pipe {
	if p := *slot; p != nil && u.Serves(p) {
		return p
	}
	if *slot != nil {
		(*slot).Close()
		*slot = nil
	}
	if p := s.trk.TakePin(u); p != nil { // package tracking: the last WATCH's, which tracks
		*slot = p
		return p
	}
	c, err := s.conn(u, upstream.Request{Kind: upstream.KindDedicated, Proto: s.proto()})
	p := c.P
	if err != nil {
		s.log.Warn("dedicated upstream connection failed", zap.Error(err))
		return nil
	}
	if !s.trk.Track(u, p) { // package tracking: it tracks as the client asked
		p.Close()
		return nil
	}
	*slot = p
	return p
}

// blocking returns the client's connection for blocking commands, opening
// it when needed, and notes its id on the server for CLIENT UNBLOCK
// (package clients' kill.go); nil when it cannot be opened.
func (s *session) blocking(u *upstream.Upstream) *pipe.Pipe {
	if p := s.blocker; p != nil && u.Serves(p) {
		return p
	}
	if s.blocker != nil {
		s.blocker.Close()
		s.blocker = nil
	}
	c, err := s.conn(u, upstream.Request{Kind: upstream.KindBlocking, Proto: s.proto()})
	p, id := c.P, c.ID
	if err != nil {
		s.log.Warn("dedicated upstream connection failed", zap.Error(err))
		return nil
	}
	if !s.trk.Track(u, p) { // package tracking: it tracks as the client asked
		p.Close()
		return nil
	}
	s.blocker = p
	s.listing.BlockOn.Store(&clients.BlockConn{Up: u, ID: id})
	return p
}

// closePinned releases the WATCH connection (closed, never reused: its
// server-side state belongs to this client).
func (s *session) closePinned() {
	if s.pinned != nil && !s.trk.KeepPin(s.pinnedUp, s.pinned) { // package tracking: kept while the client tracks
		s.pinned.Close()
	}
	s.pinned = nil
	s.pinnedUp = nil
	s.unpin = false
	s.st.Watching = false
}

// ownConns are a client's own upstream connections: its WATCH pin and its
// connection for blocking commands (forward.go).
type ownConns struct {
	pinned    *pipe.Pipe         // the WATCH connection
	pinnedUp  *upstream.Upstream // its upstream
	unpin     bool               // release the pin after the current segment
	blocker   *pipe.Pipe         // the connection for blocking commands
	blockerUp *upstream.Upstream // its upstream
}
