package session

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/tidwall/redcon"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// RESP2 client-side caching: CLIENT TRACKING ... REDIRECT <id>.
//
// Over RESP2 a tracking client's invalidations go to another connection,
// the one its REDIRECT names, subscribed to __redis__:invalidate. The id a
// client knows is a session of the proxy's (CLIENT ID), which no server
// knows, and tracking lives on a connection: the keys a connection read
// are the ones invalidated. So the proxy bridges it:
//
//   - A RESP2 client's CLIENT TRACKING (rewrite's Tracking effect) moves
//     the client to connections of its own, one per upstream it uses (the
//     isolated client's connections, share.go, kept while it tracks), and
//     is sent on its connection to the default route's upstream, its
//     REDIRECT id translated (below); the client gets the server's reply.
//     Once tracking is on, every connection of the client's own tracks as
//     it asked: those already open get the same command, those opened
//     later (another route, a WATCH pin, a blocking command's connection)
//     get it before their first command, their replies dropped. With
//     BCAST the client's connection to every upstream opens at once, so
//     every node announces the prefixes' changes.
//   - REDIRECT <id> of a live session: on each upstream the proxy opens a
//     connection of its own for the tracking client (upstream/owned.go), asks its
//     id (CLIENT ID) and subscribes it to __redis__:invalidate; the
//     tracking command names that id. A goroutine relays each
//     invalidation message it gets to the session the client named, on
//     the way its own messages go to it (subscribe_relay.go's writer):
//     as the server sends them to a redirect target, a RESP2 client in
//     subscribe mode gets the message, a bridged RESP3 client the
//     invalidate push, any other nothing.
//   - REDIRECT <id> of no session: the id is translated to one no
//     connection of the server has, so the server answers its own error
//     ("The client ID you want redirect to does not exist") in its own
//     order of checks. When the named session ends, the proxy closes the
//     connections that relayed to it: the server finds the redirect
//     broken, as it would (a RESP2 client gets nothing; CLIENT
//     TRACKINGINFO shows broken_redirect).
//   - CLIENT TRACKING OFF, RESET, and the end of the session close the
//     client's tracking connections and the relays; the client is back on
//     the shared connections.
//   - CLIENT GETREDIR is answered from the session (the id the client
//     named); CLIENT TRACKINGINFO is the server's answer from the client's
//     connection to the default route's upstream, its redirect id the
//     session's.

// noSuchClient is a client id no server connection has: REDIRECT of a
// session that does not exist is sent with it, and the server refuses it.
const noSuchClient = "9223372036854775807"

// tracker is a RESP2 session's client-side caching (see above).
type tracker struct {
	on      bool
	args    [][]byte // the CLIENT TRACKING ON in force, copied
	redirAt int      // the index in args of REDIRECT's value; 0: no REDIRECT
	target  uint64   // the session REDIRECT named (0: none)
	bcast   bool
	redirs  []*pubsub.RedirConn  // the relays to target, one per upstream
	pins    []ownConn            // WATCH pins done with, kept for the next WATCH (see keepPin)
	ups     []*upstream.Upstream // the upstreams its own connections tracked on (trackOwn)
	// A CLIENT CACHING kept for the connection of the client's next
	// command (see trackCaching): its bytes, audit record and CLIENT REPLY
	// fate.
	caching      []byte
	cachingAudit int
	cachingMute  bool
}

// alive reports whether session id is live: listed and not ending.
func (s *session) trackAlive(id uint64) bool {
	if int64(id) <= 0 || !s.srv.Sessions.Listed(id) {
		return false
	}
	return !s.srv.Redir.Ended(id)
}

// tracks reports whether the session tracks over RESP2.
func (s *session) tracks() bool { return s.trk != nil && s.trk.on }

// trackingReply answers CLIENT TRACKING, GETREDIR and TRACKINGINFO of a
// RESP2 client (rewrite's Tracking, TrackingGetRedir, TrackingInfo).
func (s *session) trackingReply(e rewrite.Effect, args [][]byte) []byte {
	s.trackCachingEnd()
	s.flush() // the commands before it are answered first
	switch e {
	case rewrite.TrackingGetRedir:
		switch {
		case !s.tracks():
			return []byte(":-1\r\n")
		default:
			return redcon.AppendInt(nil, int64(s.trk.target))
		}
	case rewrite.TrackingInfo:
		return s.trackingInfo(args)
	}
	return s.clientTracking(args)
}

// clientTracking answers CLIENT TRACKING (see above).
func (s *session) clientTracking(args [][]byte) []byte {
	on, ok := trackingSwitch(args) // bridge.go
	if s.trk == nil {
		s.trk = &tracker{}
	}
	t := s.trk
	redirAt, target := trackingRedirect(args)
	if !ok || (!on && !t.on) {
		// An error, or OFF while off: the server's answer, which changes
		// nothing of the shared connection. A REDIRECT of a live session
		// is left out (the server would find it), one of none names no
		// connection of the server's (it would not).
		a := args
		if redirAt > 0 {
			a = append([][]byte(nil), args...)
			if s.trackAlive(target) {
				a = append(a[:redirAt-1], a[redirAt+1:]...)
			} else {
				a[redirAt] = []byte(noSuchClient)
			}
		}
		return s.sharedOne(s.v.Routes.Default(), encodeArgs(a))
	}
	u := s.v.Routes.Default()
	if !s.sh.isolated() {
		s.isolate(isoTracking) // share.go: the client's own connections
	}
	p := s.ownPipe(u)
	if p == nil {
		if !t.on {
			s.endShare()
		}
		return u.Unavailable()
	}
	r := oneOn(p, s.trackCommand(u, args, redirAt, target, true))
	switch {
	case r == nil:
		r = u.Unavailable()
		fallthrough
	case !bytes.Equal(r, replyTrackOK):
		if !t.on {
			s.trackDrop(false)
		}
		return r
	case !on:
		s.trackDrop(true)
		return r
	}
	// On: the client's other connections track as it asked, the ones
	// opened later too (trackConn).
	if !t.on {
		t.ups = append(t.ups[:0], u)
	}
	t.on, t.redirAt, t.target, t.bcast = true, redirAt, target, trackingBcast(args)
	s.st.Tracking = true // rewrite refuses HELLO 3 meanwhile
	t.args = t.args[:0]
	for _, a := range args {
		t.args = append(t.args, append([]byte(nil), a...))
	}
	var others []ownConn
	for _, oc := range s.sh.own {
		if oc.p != p {
			others = append(others, oc)
		}
	}
	if s.pinned != nil {
		others = append(others, ownConn{up: s.pinnedUp, p: s.pinned})
	}
	if s.blocker != nil {
		others = append(others, ownConn{up: s.blockerUp, p: s.blocker})
	}
	others = append(others, t.pins...)
	for _, oc := range others {
		switch {
		case !s.trackConn(oc.up, oc.p):
			oc.p.Close() // its next command reopens it, or gets the error
		case !slices.Contains(t.ups, oc.up) && slices.ContainsFunc(s.sh.own, func(o ownConn) bool { return o.p == oc.p }):
			t.ups = append(t.ups, oc.up)
		}
	}
	if t.bcast {
		for _, up := range s.srv.Ups {
			s.ownPipe(up) // opened tracking (trackConn)
		}
	}
	// The relays to a session the client no longer names go.
	kept := t.redirs[:0]
	for _, rc := range t.redirs {
		if rc.Target == t.target {
			kept = append(kept, rc)
		} else {
			rc.Close(s.srv.Redir)
		}
	}
	clear(t.redirs[len(kept):])
	t.redirs = kept
	return r
}

// replyTrackOK is CLIENT TRACKING's success.
var replyTrackOK = []byte("+OK\r\n")

// trackConn turns tracking on, as the client asked, on a connection of its
// own just opened (or open when tracking went on); false when the server
// refused or the connection failed.
func (s *session) trackConn(u *upstream.Upstream, p *upstream.Pipe) bool {
	if !s.tracks() {
		return true
	}
	t := s.trk
	return bytes.Equal(oneOn(p, s.trackCommand(u, t.args, t.redirAt, t.target, false)), replyTrackOK)
}

// keepPin keeps a tracking client's WATCH connection once the WATCH is
// over (EXEC, DISCARD, UNWATCH: the server's watch is gone) instead of
// closing it, and reports whether it did: the keys the client read there
// stay tracked, as they would on its one connection to the server. The
// next WATCH to the same upstream takes it again (trackedPin).
func (s *session) keepPin(u *upstream.Upstream, p *upstream.Pipe) bool {
	if !s.tracks() || u == nil || p.Failed() != nil {
		return false
	}
	for _, oc := range s.trk.pins {
		if oc.up == u {
			return false
		}
	}
	s.trk.pins = append(s.trk.pins, ownConn{up: u, p: p})
	return true
}

// trackedPin takes the kept WATCH connection to u, if there is a usable one.
func (s *session) trackedPin(u *upstream.Upstream) *upstream.Pipe {
	if s.trk == nil {
		return nil
	}
	for i, oc := range s.trk.pins {
		if oc.up != u {
			continue
		}
		s.trk.pins = append(s.trk.pins[:i], s.trk.pins[i+1:]...)
		if oc.p.Failed() == nil && u.Fenced() && u.Current(oc.p) && s.tracks() {
			return oc.p
		}
		oc.p.Close()
		return nil
	}
	return nil
}

// closePins closes the kept WATCH connections.
func (t *tracker) closePins() {
	for _, oc := range t.pins {
		oc.p.Close()
	}
	clear(t.pins)
	t.pins = t.pins[:0]
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
	if t.caching != nil {
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
	if d.Action != rewrite.Pass || s.st.InMulti || !isClientCaching(f.Args) {
		return false
	}
	t.caching = append(t.caching[:0], f.Raw...)
	t.cachingAudit, t.cachingMute = c.audit, c.drop
	return true
}

// trackCachingEnd adds a kept CLIENT CACHING that no command followed in
// the client's read to the segment, for the default route's connection.
func (s *session) trackCachingEnd() {
	if s.trk != nil && s.trk.caching != nil {
		s.emitCaching(s.v.Routes.Default(), s.pinned)
	}
}

// emitCaching adds the kept CLIENT CACHING to the segment, for p (nil: the
// client's own connection to u).
func (s *session) emitCaching(u *upstream.Upstream, p *upstream.Pipe) {
	t := s.trk
	raw, audit, mute := t.caching, t.cachingAudit, t.cachingMute
	t.caching = nil
	own := p == nil
	if own {
		p = s.ownPipe(u)
	}
	if p == nil {
		s.addLocal(u.Unavailable(), audit, mute)
		return
	}
	s.target(u, p, true, own)
	b := s.parts[s.cur].b
	b.Encode(resp.Frame{Raw: raw}, &rewrite.Decision{Action: rewrite.Pass})
	s.slots = append(s.slots, rslot{part: s.cur, idx: b.N, audit: audit, target: u, drop: mute})
	b.N++
	s.simple = false
}

// trackOwn is trackConn for the client's own connection to u (share.go's
// ownPipe). One that replaces a connection that tracked, which failed or
// was closed, is refused, and the client is closed after the replies so
// far: the keys it read there are tracked no more, and a client whose
// connection to the server broke drops its cache, as it would.
func (s *session) trackOwn(u *upstream.Upstream, p *upstream.Pipe) bool {
	if !s.tracks() {
		return true
	}
	t := s.trk
	for _, v := range t.ups {
		if v == u {
			s.log.Warn("a tracking client's connection to its upstream broke; closing the client, which drops its cache",
				zap.String("upstream", u.Name()))
			s.closing = true
			return false
		}
	}
	if !s.trackConn(u, p) {
		return false
	}
	t.ups = append(t.ups, u)
	return true
}

// trackDrop ends the client's tracking: its own connections close (the
// server forgets what they tracked), and so do the relays. off: tracking
// was on, and the WATCH pin, which stays, is told CLIENT TRACKING OFF.
func (s *session) trackDrop(off bool) {
	t := s.trk
	if off && s.pinned != nil {
		oneOn(s.pinned, encodeArgs([][]byte{[]byte("CLIENT"), []byte("TRACKING"), []byte("OFF")}))
	}
	if off && s.blocker != nil {
		s.blocker.Close()
		s.blocker = nil
	}
	s.endShare()
	t.closePins()
	for _, rc := range t.redirs {
		rc.Close(s.srv.Redir)
	}
	clear(t.redirs)
	*t = tracker{args: t.args[:0], redirs: t.redirs[:0], pins: t.pins, ups: t.ups[:0]}
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
		s.trk.closePins()
		for _, rc := range s.trk.redirs {
			rc.Close(s.srv.Redir)
		}
		s.trk = nil
	}
	s.srv.Redir.End(s.id, s.srv.Sessions.Listed)
}

// trackCommand is args for the client's connection to u: REDIRECT's value
// (at redirAt) is the id of the relay to target on u, opened when needed.
// A target that is not a live session: strict (the client's own command),
// an id no connection has, so the server refuses as it would; otherwise
// (a connection opened later) REDIRECT is left out, and the server, like
// one whose redirect broke, sends the invalidations nowhere.
func (s *session) trackCommand(u *upstream.Upstream, args [][]byte, redirAt int, target uint64, strict bool) []byte {
	if redirAt == 0 || target == 0 {
		return encodeArgs(args)
	}
	id := noSuchClient
	if rc := s.redirTo(u, target); rc != nil {
		id = strconv.FormatInt(rc.ID, 10)
	} else if !strict {
		cut := append(append([][]byte(nil), args[:redirAt-1]...), args[redirAt+1:]...)
		return encodeArgs(cut)
	}
	a := append([][]byte(nil), args...)
	a[redirAt] = []byte(id)
	return encodeArgs(a)
}

// redirTo returns the tracking client's relay to target on u, opening it
// when needed; nil when target is no live session or the connection
// cannot be opened.
func (s *session) redirTo(u *upstream.Upstream, target uint64) *pubsub.RedirConn {
	t := s.trk
	for _, rc := range t.redirs {
		if rc.U == u && rc.Target == target {
			if rc.Done() {
				return nil // the target ended
			}
			return rc
		}
	}
	if !s.trackAlive(target) {
		return nil
	}
	rc := s.srv.Redir.Open(s.srv.Ctx, s.client(), u, target, func() bool { return s.trackAlive(target) })
	if rc != nil {
		t.redirs = append(t.redirs, rc)
	}
	return rc
}

// sharedOne sends one command on u's shared connection (one that changes
// nothing of it) and returns its reply.
func (s *session) sharedOne(u *upstream.Upstream, cmd []byte) []byte {
	p := u.Shared(s.id, 2)
	if p == nil {
		return u.Unavailable()
	}
	if r := oneOn(p, cmd); r != nil {
		return r
	}
	return u.Unavailable()
}

// oneOn sends one command on p and returns its reply (a copy), nil when
// the connection failed.
func oneOn(p *upstream.Pipe, cmd []byte) []byte {
	b := upstream.NewBatch()
	b.Out = append(b.Out, cmd...)
	b.N, b.Max = 1, 1<<20
	if err := p.Send(b); err != nil {
		return nil
	}
	p.Await(b)
	if b.Lost || len(b.Ends) == 0 {
		return nil
	}
	return append([]byte(nil), b.Reply(0)...)
}

// encodeArgs is args as a RESP array of bulk strings.
func encodeArgs(args [][]byte) []byte {
	out := redcon.AppendArray(nil, len(args))
	for _, a := range args {
		out = redcon.AppendBulk(out, a)
	}
	return out
}

// trackingRedirect finds the value of CLIENT TRACKING's first REDIRECT, as
// the server reads the options (REDIRECT and PREFIX take a value): its
// index (0: none) and the session it names (0: not a positive integer,
// which the server refuses as it is).
func trackingRedirect(args [][]byte) (at int, target uint64) {
	for j := 3; j+1 < len(args); j++ {
		switch {
		case rewrite.EqualFold(args[j], "REDIRECT"):
			v, ok := rewrite.ParseInt(args[j+1])
			if !ok || v <= 0 {
				return 0, 0
			}
			return j + 1, uint64(v)
		case rewrite.EqualFold(args[j], "PREFIX"):
			j++
		}
	}
	return 0, 0
}

// trackingBcast reports whether CLIENT TRACKING names BCAST.
func trackingBcast(args [][]byte) bool {
	for j := 3; j < len(args); j++ {
		switch {
		case rewrite.EqualFold(args[j], "BCAST"):
			return true
		case (rewrite.EqualFold(args[j], "PREFIX") || rewrite.EqualFold(args[j], "REDIRECT")) && j+1 < len(args):
			j++
		}
	}
	return false
}

// replyTrackingOff is CLIENT TRACKINGINFO of a RESP2 client that does not
// track, as Redis 7.0 and Valkey 8 answer it.
var replyTrackingOff = []byte("*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n")

// trackingInfo answers CLIENT TRACKINGINFO: the server's answer from the
// client's connection to the default route's upstream, its redirect the
// session's; not tracking, the server's answer for a client that does not.
func (s *session) trackingInfo(args [][]byte) []byte {
	u := s.v.Routes.Default()
	if !s.tracks() {
		return replyTrackingOff
	}
	p := s.ownPipe(u)
	if p == nil {
		return u.Unavailable()
	}
	r := oneOn(p, encodeArgs(args))
	if r == nil {
		return u.Unavailable()
	}
	if s.trk.redirAt == 0 {
		return r
	}
	key := []byte("$8\r\nredirect\r\n:")
	i := bytes.Index(r, key)
	if i < 0 {
		return r
	}
	start := i + len(key)
	end := bytes.Index(r[start:], []byte("\r\n"))
	if end < 0 {
		return r
	}
	out := append([]byte(nil), r[:start]...)
	out = strconv.AppendUint(out, s.trk.target, 10)
	return append(out, r[start+end:]...)
}
