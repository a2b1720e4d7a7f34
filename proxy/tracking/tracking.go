package tracking

import (
	"bytes"
	"context"
	"slices"
	"strconv"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
)

// noSuchClient is a client id no server connection has: REDIRECT of a
// session that does not exist is sent with it, and the server refuses it.
const noSuchClient = "9223372036854775807"

// replyOK is CLIENT TRACKING's success.
var replyOK = []byte("+OK\r\n")

// ReplyOff is CLIENT TRACKINGINFO of a RESP2 client that does not track,
// as Redis 7.0 and Valkey 8 answer it.
var ReplyOff = []byte("*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n")

// Env is what a Tracker needs of its session and its server.
type Env struct {
	Ctx    context.Context
	ID     uint64            // the session's id: its share of the shared connections
	Redir  *pubsub.Redirects // the server's relays and their targets
	Client *pubsub.Client    // the tracking client, as its relays know it
	Listed func(uint64) bool // whether session id is listed (ending ones included)
	// Transport gives the shared connections it asks on (upstream.Via:
	// nil is Direct).
	Transport upstream.Transport
}

// Conn is one of the client's own connections to an upstream.
type Conn struct {
	Up *upstream.Upstream
	P  *pipe.Pipe
}

// Caching is a CLIENT CACHING kept for the connection of the client's
// next command: its bytes, and what the session noted of it (its audit
// record, its CLIENT REPLY fate).
type Caching struct {
	Raw   []byte
	Audit int
	Mute  bool
}

// Tracker is a RESP2 session's client-side caching (see the package
// comment). Its methods are called from the session's goroutine; On,
// GetRedir, Track, Own, KeepPin, TakePin and Caching may be called on a
// nil Tracker (a session that never sent CLIENT TRACKING).
type Tracker struct {
	env     Env
	on      bool
	args    [][]byte // the CLIENT TRACKING ON in force, copied
	redirAt int      // the index in args of REDIRECT's value; 0: no REDIRECT
	target  uint64   // the session REDIRECT named (0: none)
	bcast   bool
	redirs  []*pubsub.RedirConn  // the relays to target, one per upstream
	pins    []Conn               // WATCH pins done with, kept for the next WATCH (see KeepPin)
	ups     []*upstream.Upstream // the upstreams its own connections tracked on (Own)
	caching Caching              // Raw nil: none kept (see KeepCaching)
}

// New returns the tracker of a session, which does not track yet.
func New(env Env) *Tracker { return &Tracker{env: env} }

// On reports whether the client tracks.
func (t *Tracker) On() bool { return t != nil && t.on }

// Bcast reports whether the tracking in force is BCAST: the client's
// connection to every upstream opens at once.
func (t *Tracker) Bcast() bool { return t.bcast }

// GetRedir answers CLIENT GETREDIR: the session REDIRECT named, -1 when
// the client does not track.
func (t *Tracker) GetRedir() []byte {
	if !t.On() {
		return []byte(":-1\r\n")
	}
	return resp.AppendInt(nil, int64(t.target))
}

// alive reports whether session id is live: listed and not ending.
func (t *Tracker) alive(id uint64) bool {
	if id == 0 || !t.env.Listed(id) {
		return false
	}
	return !t.env.Redir.Ended(id)
}

// Unchanged answers a CLIENT TRACKING that changes nothing (an error, or
// OFF while off) with the server's answer from u's shared connection,
// which it changes nothing of either, and reports whether it did. A
// REDIRECT of a live session is left out (the server would find it), one
// of none names no connection of the server's (it would not).
func (t *Tracker) Unchanged(u *upstream.Upstream, args [][]byte) ([]byte, bool) {
	on, ok := OnOff(args)
	if ok && (on || t.on) {
		return nil, false
	}
	redirAt, target := redirect(args)
	a := args
	if redirAt > 0 {
		a = append([][]byte(nil), args...)
		if t.alive(target) {
			a = append(a[:redirAt-1], a[redirAt+1:]...)
		} else {
			a[redirAt] = []byte(noSuchClient)
		}
	}
	p := upstream.SharedVia(t.env.Ctx, t.env.Transport, u, t.env.ID, 2)
	if p == nil {
		return u.Unavailable(), true
	}
	if r := oneOn(p, encodeArgs(a)); r != nil {
		return r, true
	}
	return u.Unavailable(), true
}

// Outcome is what a CLIENT TRACKING sent by Turn did.
type Outcome int

const (
	// Refused: the server refused it, or the connection failed; nothing
	// changed. A client that did not track ends its tracking (the
	// session's own connections close).
	Refused Outcome = iota
	// Off: tracking went off; the session ends it (Drop).
	Off
	// On: tracking is on as the client asked; the session has its other
	// connections track (Spread) and forgets the relays to a session the
	// client no longer names (Prune).
	On
)

// Turn sends CLIENT TRACKING ON or OFF, args, on p, the client's own
// connection to u (the default route's upstream), its REDIRECT translated,
// and returns the server's reply (nil: the connection failed) and what it
// did. Turned on, args is the tracking in force.
func (t *Tracker) Turn(u *upstream.Upstream, p *pipe.Pipe, args [][]byte) ([]byte, Outcome) {
	on, _ := OnOff(args)
	redirAt, target := redirect(args)
	r := oneOn(p, t.command(u, args, redirAt, target, true))
	switch {
	case r == nil || !bytes.Equal(r, replyOK):
		return r, Refused
	case !on:
		return r, Off
	}
	if !t.on {
		t.ups = append(t.ups[:0], u)
	}
	t.on, t.redirAt, t.target, t.bcast = true, redirAt, target, bcast(args)
	t.args = t.args[:0]
	for _, a := range args {
		t.args = append(t.args, append([]byte(nil), a...))
	}
	return r, On
}

// Spread turns tracking on, as the client asked, on the client's other
// connections once it went on: own, the connections of its share (their
// upstreams are noted as Own notes them), then other (its WATCH pin, its
// connection for blocking commands) and the kept WATCH pins. One the
// server refuses, or whose connection failed, is closed: its next command
// reopens it, or gets the error.
func (t *Tracker) Spread(own, other []Conn) {
	for _, c := range own {
		switch {
		case !t.Track(c.Up, c.P):
			c.P.Close()
		case !slices.Contains(t.ups, c.Up):
			t.ups = append(t.ups, c.Up)
		}
	}
	for _, c := range append(other, t.pins...) {
		if !t.Track(c.Up, c.P) {
			c.P.Close()
		}
	}
}

// Prune closes the relays to a session the client no longer names.
func (t *Tracker) Prune() {
	kept := t.redirs[:0]
	for _, rc := range t.redirs {
		if rc.Target == t.target {
			kept = append(kept, rc)
		} else {
			rc.Close(t.env.Redir)
		}
	}
	clear(t.redirs[len(kept):])
	t.redirs = kept
}

// Track turns tracking on, as the client asked, on a connection of its
// own to u just opened (or open when tracking went on); false when the
// server refused or the connection failed. A client that does not track
// has nothing to turn on.
func (t *Tracker) Track(u *upstream.Upstream, p *pipe.Pipe) bool {
	if !t.On() {
		return true
	}
	return bytes.Equal(oneOn(p, t.command(u, t.args, t.redirAt, t.target, false)), replyOK)
}

// Own is Track for the client's own connection to u of its share, and
// notes u. It reports whether p may be used. One that replaces a
// connection that tracked, which failed or was closed, is refused, broke:
// the keys the client read there are tracked no more, and a client whose
// connection to the server broke drops its cache, so the session closes
// the client after the replies so far.
func (t *Tracker) Own(u *upstream.Upstream, p *pipe.Pipe) (ok, broke bool) {
	if !t.On() {
		return true, false
	}
	if slices.Contains(t.ups, u) {
		return false, true
	}
	if !t.Track(u, p) {
		return false, false
	}
	t.ups = append(t.ups, u)
	return true, false
}

// KeepPin keeps a tracking client's WATCH connection p to u once the WATCH
// is over (EXEC, DISCARD, UNWATCH: the server's watch is gone) instead of
// its being closed, and reports whether it did: the keys the client read
// there stay tracked, as they would on its one connection to the server.
// The next WATCH to the same upstream takes it again (TakePin).
func (t *Tracker) KeepPin(u *upstream.Upstream, p *pipe.Pipe) bool {
	if !t.On() || u == nil || p.Failed() != nil {
		return false
	}
	for _, c := range t.pins {
		if c.Up == u {
			return false
		}
	}
	t.pins = append(t.pins, Conn{Up: u, P: p})
	return true
}

// TakePin takes the kept WATCH connection to u, if there is a usable one;
// an unusable one is closed.
func (t *Tracker) TakePin(u *upstream.Upstream) *pipe.Pipe {
	if t == nil {
		return nil
	}
	for i, c := range t.pins {
		if c.Up != u {
			continue
		}
		t.pins = append(t.pins[:i], t.pins[i+1:]...)
		if u.Serves(c.P) && t.On() {
			return c.P
		}
		c.P.Close()
		return nil
	}
	return nil
}

// closePins closes the kept WATCH connections.
func (t *Tracker) closePins() {
	for _, c := range t.pins {
		c.P.Close()
	}
	clear(t.pins)
	t.pins = t.pins[:0]
}

// closeRelays closes the relays.
func (t *Tracker) closeRelays() {
	for _, rc := range t.redirs {
		rc.Close(t.env.Redir)
	}
}

// Drop ends the client's tracking: the kept WATCH connections and the
// relays close. The session closes its own connections (the server
// forgets what they tracked) and tells the WATCH pin, which stays,
// CLIENT TRACKING OFF (SendOff).
func (t *Tracker) Drop() {
	t.closePins()
	t.closeRelays()
	clear(t.redirs)
	*t = Tracker{env: t.env, args: t.args[:0], redirs: t.redirs[:0], pins: t.pins, ups: t.ups[:0]}
}

// End closes the kept WATCH connections and the relays when the session
// ends.
func (t *Tracker) End() {
	t.closePins()
	t.closeRelays()
}

// SendOff sends CLIENT TRACKING OFF on p, its reply dropped.
func SendOff(p *pipe.Pipe) {
	oneOn(p, encodeArgs([][]byte{[]byte("CLIENT"), []byte("TRACKING"), []byte("OFF")}))
}

// KeepCaching keeps a CLIENT CACHING (its bytes, copied) for the
// connection of the client's next command.
func (t *Tracker) KeepCaching(raw []byte, audit int, mute bool) {
	t.caching.Raw = append(t.caching.Raw[:0], raw...)
	t.caching.Audit, t.caching.Mute = audit, mute
}

// Caching reports whether a CLIENT CACHING is kept.
func (t *Tracker) Caching() bool { return t != nil && t.caching.Raw != nil }

// TakeCaching returns the kept CLIENT CACHING, which is kept no more.
func (t *Tracker) TakeCaching() Caching {
	c := t.caching
	t.caching.Raw = nil
	return c
}

// Info is CLIENT TRACKINGINFO, args, sent on p, the client's connection to
// the default route's upstream: the server's answer, its redirect the
// session's (nil: the connection failed). A client that does not track
// is answered ReplyOff instead, without asking the server.
func (t *Tracker) Info(p *pipe.Pipe, args [][]byte) []byte {
	r := oneOn(p, encodeArgs(args))
	if r == nil || t.redirAt == 0 {
		return r
	}
	return spliceRedirect(r, t.target)
}

// spliceRedirect is CLIENT TRACKINGINFO's reply r with target for its
// redirect id; r as it is when it has none.
func spliceRedirect(r []byte, target uint64) []byte {
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
	out = strconv.AppendUint(out, target, 10)
	return append(out, r[start+end:]...)
}

// command is args for the client's connection to u: REDIRECT's value (at
// redirAt) is the id of the relay to target on u, opened when needed. A
// target that is not a live session: strict (the client's own command),
// an id no connection has, so the server refuses as it would; otherwise
// (a connection opened later) REDIRECT is left out, and the server, like
// one whose redirect broke, sends the invalidations nowhere.
func (t *Tracker) command(u *upstream.Upstream, args [][]byte, redirAt int, target uint64, strict bool) []byte {
	if redirAt == 0 || target == 0 {
		return encodeArgs(args)
	}
	id := noSuchClient
	if rc := t.redirTo(u, target); rc != nil {
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
func (t *Tracker) redirTo(u *upstream.Upstream, target uint64) *pubsub.RedirConn {
	for _, rc := range t.redirs {
		if rc.U == u && rc.Target == target {
			if rc.Done() {
				return nil // the target ended
			}
			return rc
		}
	}
	if !t.alive(target) {
		return nil
	}
	rc := t.env.Redir.Open(t.env.Ctx, t.env.Client, u, target, func() bool { return t.alive(target) })
	if rc != nil {
		t.redirs = append(t.redirs, rc)
	}
	return rc
}

// oneOn sends one command on p and returns its reply (a copy), nil when
// the connection failed.
func oneOn(p *pipe.Pipe, cmd []byte) []byte {
	b := pipe.NewBatch()
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
	out := resp.AppendArray(nil, len(args))
	for _, a := range args {
		out = resp.AppendBulk(out, a)
	}
	return out
}
