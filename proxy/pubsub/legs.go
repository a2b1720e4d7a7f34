package pubsub

import (
	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// A bridged RESP3 client's legs: its connections of its own to the
// upstreams other than the bridge's first (see package session's legs.go for
// how the session gathers commands for one leg at a time). Each leg's relay
// hands on to the first connection's writer, so pushes from every leg are
// merged in arrival order.

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
