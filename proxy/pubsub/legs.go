package pubsub

import (
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
)

// The bridge's legs.
//
// A bridged RESP3 client reaches every upstream its routes name: its
// commands are planned and routed as in normal service (package session's
// bridge.go), and each goes on a connection of the client's own to its
// upstream, a leg, opened on first use (owned by the upstream, through its
// fence check: upstream/owned.go). The bridge's first connection is the
// upstream of the command that entered it (the default route's); subscribe
// commands and PING go there. A leg is a Subscriber whose relay hands on to
// the first connection's writer.
//
// Order: commands are gathered for one leg at a time; before one goes to
// another leg, a barrier on the current one hands every reply of it to the
// client first, so replies keep the client's order. Pushes (messages,
// invalidations) are handed on as each leg's relay reads them: merged in
// arrival order. A leg opened while the client tracks gets the client's own
// CLIENT TRACKING command first (its reply dropped), and a CLIENT TRACKING
// the client sends later goes to every open leg, so each upstream
// invalidates the keys the client read there. A CLIENT CACHING (tracking
// OPTIN or OPTOUT) applies to the connection's next command, so it is kept
// and sent to the leg of the client's next command, just before it (its
// reply keeps its place); when no command follows in the same read, it goes
// to the current leg. A WATCH binds the bridge to
// its leg's upstream until EXEC, DISCARD, UNWATCH or RESET (a key routed
// elsewhere is refused with CROSSROUTE), as a WATCH pin does in normal
// service. A leg whose connection fails closes the client, as the first
// connection's does: its replies in flight are lost, and so would be the
// invalidations of what the client read there (a client that reconnects
// drops its cache).

// Leg returns the bridge's open leg to u, nil when none is open (the
// bridge's first connection's upstream is its own: sub).
func (sub *Subscriber) Leg(u *upstream.Upstream) *Subscriber {
	if u == nil || u == sub.U {
		return sub
	}
	return sub.legs[u]
}

// OpenLeg makes the owned connection dl to u a leg of the bridge and
// starts its relay; the connection is named with the barrier's nonce and,
// while the client tracks, tracks as it asked (their replies dropped).
// When the leg's relay ends, LegDown says so.
func (sub *Subscriber) OpenLeg(u *upstream.Upstream, dl upstream.Dialed) (*Subscriber, error) {
	l := &Subscriber{
		c: sub.c, U: u, nc: dl.Conn, w: sub, RESP3: true, max: sub.max,
		ping: sub.ping, pongSub: sub.pongSub, pongPlain: sub.pongPlain,
		barrier: make(chan bool, 1),
		Hint:    make(chan struct{}, 1),
		Ended:   make(chan struct{}),
	}
	l.acct.Budget = sub.c.Mem
	l.rr = resp.NewReader(dl.Buf)
	l.rr.Acct = &l.acct
	if sub.legs == nil {
		sub.legs = map[*upstream.Upstream]*Subscriber{}
	}
	sub.legs[u] = l
	go func() {
		l.relay()
		select {
		case sub.LegDown <- struct{}{}:
		default:
		}
	}()
	first := append([]byte(nil), sub.setname...)
	l.Swap(nil)
	if sub.Tracking {
		first = append(first, sub.TrackRaw...)
		l.Swap(nil)
	}
	if err := l.Send(first); err != nil {
		return nil, err
	}
	return l, nil
}

// Legs returns the bridge's connections: its first, then the legs to
// other upstreams.
func (sub *Subscriber) Legs() []*Subscriber {
	out := make([]*Subscriber, 0, 1+len(sub.legs))
	out = append(out, sub)
	for _, l := range sub.legs {
		out = append(out, l)
	}
	return out
}

// KeepCaching keeps raw, a CLIENT CACHING, for the leg of the client's
// next command (FlushCaching).
func (m *Mode) KeepCaching(raw []byte) {
	m.Caching = append(m.Caching[:0], raw...)
}

// FlushCaching adds a kept CLIENT CACHING to the commands gathered for the
// current leg.
func (m *Mode) FlushCaching(out *[]byte) {
	if len(m.Caching) > 0 {
		*out = append(*out, m.Caching...)
		m.Caching = m.Caching[:0]
	}
}

// LegFor returns the leg to u (nil: the default route's, the bridge's
// first connection), opening it when needed.
func (m *Mode) LegFor(u *upstream.Upstream) (*Subscriber, error) {
	if l := m.Leg(u); l != nil {
		return l, nil
	}
	dl, err := upstream.OwnVia(m.env.Ctx, m.env.Transport, u, 3)
	if err != nil {
		m.c.Log.Warn("bridge upstream connection failed", zap.String("upstream", u.Name()), zap.Error(err))
		return nil, err
	}
	return m.OpenLeg(u, dl) // named with the barrier's nonce, tracking as the client asked
}

// ToLeg makes l the leg the gathered commands go to: what was gathered for
// the current one is sent, and its replies handed to the client, first.
func (m *Mode) ToLeg(out *[]byte, l *Subscriber) error {
	if m.Cur == l {
		return nil
	}
	if err := m.Barrier(out); err != nil {
		return err
	}
	m.Cur = l
	return nil
}

// Track notes a CLIENT TRACKING the client sent, raw, which turns tracking
// on or off, and sends it to every open leg but the current one (which got
// it), their replies dropped: every leg tracks as the client asked. Those
// legs are idle: every reply of theirs was handed on when the bridge left
// them.
func (m *Mode) Track(on bool, raw []byte) error {
	m.Tracking, m.TrackRaw = on, nil
	if on {
		m.TrackRaw = append([]byte(nil), raw...)
	}
	for _, l := range m.Legs() {
		if l == m.Cur {
			continue
		}
		l.Swap(nil)
		if err := l.Send(raw); err != nil {
			return err
		}
	}
	return nil
}
