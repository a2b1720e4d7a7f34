package session

import (
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/tracking"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// RESP2 client-side caching, the session's side: package tracking says
// what the proxy does and keeps the state (s.trk, a *tracking.Tracker; nil
// until the client's first CLIENT TRACKING). What is the session's is here:
// the client's own connections a CLIENT TRACKING opens and closes (its
// share, share.go; its WATCH pin and its connection for blocking commands,
// forward.go), the client closed when a connection that tracked breaks,
// and a kept CLIENT CACHING added to the round's segment.

// tracks reports whether the session tracks over RESP2.
func (s *session) tracks() bool { return s.trk.On() }

// trackingReply answers CLIENT TRACKING, GETREDIR and TRACKINGINFO of a
// RESP2 client (rewrite's Tracking, TrackingGetRedir, TrackingInfo).
func (s *session) trackingReply(e rewrite.Effect, args [][]byte) []byte {
	s.trackCachingEnd()
	s.flush() // the commands before it are answered first
	switch e {
	case rewrite.TrackingGetRedir:
		return s.trk.GetRedir()
	case rewrite.TrackingInfo:
		return s.trackingInfo(args)
	}
	return s.clientTracking(args)
}

// clientTracking answers CLIENT TRACKING: on the client's own connection
// to the default route's upstream, which it is moved to, when it changes
// the client's tracking.
func (s *session) clientTracking(args [][]byte) []byte {
	if s.trk == nil {
		s.trk = tracking.New(tracking.Env{Ctx: s.srv.Ctx, ID: s.id, Redir: s.srv.Redir,
			Client: s.client(), Listed: s.srv.Sessions.Listed, Transport: s.srv.Transport})
	}
	t := s.trk
	u := s.v.Routes.Default()
	if r, ok := t.Unchanged(u, args); ok {
		return r
	}
	if !s.sh.Isolated() {
		s.isolate(limits.IsoTracking) // share.go: the client's own connections
	}
	p := s.ownPipe(u)
	if p == nil {
		if !t.On() {
			s.endShare()
		}
		return u.Unavailable()
	}
	r, out := t.Turn(u, p, args)
	switch out {
	case tracking.Refused:
		if r == nil {
			r = u.Unavailable()
		}
		if !t.On() {
			s.trackDrop(false)
		}
		return r
	case tracking.Off:
		s.trackDrop(true)
		return r
	}
	// On: the client's other connections track as it asked, the ones
	// opened later too (tracking.Tracker.Track).
	s.st.Tracking = true // rewrite refuses HELLO 3 meanwhile
	var own, other []tracking.Conn
	for _, oc := range s.sh.own {
		if oc.p != p {
			own = append(own, tracking.Conn{Up: oc.up, P: oc.p})
		}
	}
	if s.pinned != nil {
		other = append(other, tracking.Conn{Up: s.pinnedUp, P: s.pinned})
	}
	if s.blocker != nil {
		other = append(other, tracking.Conn{Up: s.blockerUp, P: s.blocker})
	}
	t.Spread(own, other)
	if t.Bcast() {
		for _, up := range s.srv.Ups {
			s.ownPipe(up) // opened tracking (trackOwn)
		}
	}
	t.Prune()
	return r
}

// trackOwn is tracking.Tracker.Own for the client's own connection to u
// (share.go's ownPipe). One that replaces a connection that tracked, which
// failed or was closed, is refused, and the client is closed after the
// replies so far: the keys it read there are tracked no more, and a client whose
// connection to the server broke drops its cache, as it would.
func (s *session) trackOwn(u *upstream.Upstream, p *pipe.Pipe) bool {
	ok, broke := s.trk.Own(u, p)
	if broke {
		s.log.Warn("a tracking client's connection to its upstream broke; closing the client, which drops its cache",
			zap.String("upstream", u.Name()))
		s.closing = true
	}
	return ok
}

// trackCaching keeps a tracking client's CLIENT CACHING, which applies to
// the next command of the connection it is sent on, for the connection of
// the client's next command: with several upstreams that may be another
// than the default route's (keyless CLIENT CACHING's). It reports whether
// it kept the command (the caller adds nothing for it). Before any other
// command, a kept one is added to the segment, its reply in its place:
// on that command's connection when it is forwarded, else (answered by the
// proxy, queued in MULTI) on the default route's, as it is when the
// client's read holds no next command (trackCachingEnd).
func (s *session) trackCaching(c *command) bool {
	f, d := c.f, &c.sp.Decision
	if !s.tracks() || len(s.srv.Ups) < 2 {
		return false
	}
	t := s.trk
	if t.Caching() {
		u, p := s.v.Routes.Default(), s.pinned
		switch {
		case s.st.InMulti || (d.Action != rewrite.Pass && d.Action != rewrite.Rewrite):
		case p != nil:
			u = s.pinnedUp
		default:
			u = c.up(s)
		}
		s.emitCaching(u, p)
	}
	if d.Action != rewrite.Pass || s.st.InMulti || !tracking.IsCaching(f.Args) {
		return false
	}
	t.KeepCaching(f.Raw, c.audit, c.drop)
	return true
}

// trackCachingEnd adds a kept CLIENT CACHING that no command followed in
// the client's read to the segment, for the default route's connection.
func (s *session) trackCachingEnd() {
	if s.trk.Caching() {
		s.emitCaching(s.v.Routes.Default(), s.pinned)
	}
}

// emitCaching adds the kept CLIENT CACHING to the segment, for p (nil: the
// client's own connection to u).
func (s *session) emitCaching(u *upstream.Upstream, p *pipe.Pipe) {
	kc := s.trk.TakeCaching()
	own := p == nil
	if own {
		p = s.ownPipe(u)
	}
	if p == nil {
		s.seg.AddLocal(u.Unavailable(), kc.Audit, kc.Mute)
		return
	}
	s.target(u, p, true, own)
	b := s.seg.Parts[s.seg.Cur].B
	b.Encode(resp.Frame{Raw: kc.Raw}, &rewrite.Decision{Action: rewrite.Pass})
	s.seg.Forwarded(kc.Audit, u, kc.Mute, nil)
	s.seg.Simple = false
	b.N++
}

// trackDrop ends the client's tracking: its own connections close (the
// server forgets what they tracked), and so do the relays. off: tracking
// was on, and the WATCH pin, which stays, is told CLIENT TRACKING OFF.
func (s *session) trackDrop(off bool) {
	if off && s.pinned != nil {
		tracking.SendOff(s.pinned)
	}
	if off && s.blocker != nil {
		s.blocker.Close()
		s.blocker = nil
	}
	s.endShare()
	s.trk.Drop()
	s.st.Tracking = false
}

// trackReset ends tracking on RESET, as the server does.
func (s *session) trackReset() {
	if s.tracks() {
		s.trackDrop(true)
	}
}

// trackEnd closes the session's relays when it ends, and those of the
// clients that named it.
func (s *session) trackEnd() {
	if s.trk != nil {
		s.trk.End()
		s.trk = nil
	}
	s.srv.Redir.End(s.id)
}

// trackingInfo answers CLIENT TRACKINGINFO: the server's answer from the
// client's connection to the default route's upstream, its redirect the
// session's; not tracking, the server's answer for a client that does not.
func (s *session) trackingInfo(args [][]byte) []byte {
	u := s.v.Routes.Default()
	if !s.tracks() {
		return tracking.ReplyOff
	}
	p := s.ownPipe(u)
	if p == nil {
		return u.Unavailable()
	}
	if r := s.trk.Info(p, args); r != nil {
		return r
	}
	return u.Unavailable()
}
