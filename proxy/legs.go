package proxy

import (
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The bridge's legs.
//
// A bridged RESP3 client (bridge.go) reaches every upstream its routes
// name: its commands are planned and routed as in normal service, and each
// goes on a connection of the client's own to its upstream, a leg, opened
// on first use (owned by the upstream, through its fence check: upstream/owned.go).
// The bridge's first connection is the upstream of the command that
// entered it (the default route's); subscribe commands and PING go there.
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

// isClientCaching reports whether args is CLIENT CACHING ...
func isClientCaching(args [][]byte) bool {
	return len(args) >= 2 && rewrite.EqualFold(args[0], "CLIENT") && rewrite.EqualFold(args[1], "CACHING")
}

// flushCaching adds a kept CLIENT CACHING to the commands gathered for the
// current leg.
func (s *session) flushCaching(out *[]byte) {
	if sub := s.sub; len(sub.caching) > 0 {
		*out = append(*out, sub.caching...)
		sub.caching = sub.caching[:0]
	}
}

// legFor returns the leg to u (nil: the default route's, the bridge's
// first connection), opening it when needed.
func (s *session) legFor(u *upstream.Upstream) (*subscriber, error) {
	sub := s.sub
	if u == nil || u == sub.u {
		return sub, nil
	}
	if l := sub.legs[u]; l != nil {
		return l, nil
	}
	dl, err := u.Own(s.srv.ctx, 3) // upstream/owned.go
	nc, br := dl.Conn, dl.Buf
	if err != nil {
		s.log.Warn("bridge upstream connection failed", zap.String("upstream", u.Name()), zap.Error(err))
		return nil, err
	}
	l := &subscriber{
		s: s, u: u, nc: nc, w: sub, resp3: true, max: sub.max,
		ping: sub.ping, pongSub: sub.pongSub, pongPlain: sub.pongPlain,
		barrier: make(chan bool, 1),
		hint:    make(chan struct{}, 1),
		ended:   make(chan struct{}),
	}
	l.acct.Budget = s.srv.mem
	l.rr = resp.NewReader(br)
	l.rr.Acct = &l.acct
	if sub.legs == nil {
		sub.legs = map[*upstream.Upstream]*subscriber{}
	}
	sub.legs[u] = l
	go func() {
		l.relay()
		select {
		case sub.legDown <- struct{}{}:
		default:
		}
	}()
	// Named with the barrier's nonce, tracking as the client asked: their
	// replies are dropped.
	first := append([]byte(nil), sub.setname...)
	l.swap(nil)
	if sub.tracking {
		first = append(first, sub.trackRaw...)
		l.swap(nil)
	}
	if err := l.send(first); err != nil {
		return nil, err
	}
	return l, nil
}

// toLeg makes l the leg the gathered commands go to: what was gathered for
// the current one is sent, and its replies handed to the client, first.
func (s *session) toLeg(out *[]byte, l *subscriber) error {
	if s.sub.cur == l {
		return nil
	}
	if err := s.bridgeBarrier(out); err != nil {
		return err
	}
	s.sub.cur = l
	return nil
}

// toOtherLegs sends raw, a CLIENT TRACKING the client sent, to every open
// leg but the current one (which got it), their replies dropped. Those legs
// are idle: every reply of theirs was handed on when the bridge left them.
func (s *session) toOtherLegs(raw []byte) error {
	sub := s.sub
	for _, l := range append([]*subscriber{sub}, legList(sub)...) {
		if l == sub.cur {
			continue
		}
		l.swap(nil)
		if err := l.send(raw); err != nil {
			return err
		}
	}
	return nil
}

// legList returns the bridge's legs to other upstreams.
func legList(sub *subscriber) []*subscriber {
	out := make([]*subscriber, 0, len(sub.legs))
	for _, l := range sub.legs {
		out = append(out, l)
	}
	return out
}

// stopRelays closes the bridge's connections (its first and every leg) and
// waits until their relays stopped.
func (sub *subscriber) stopRelays() {
	sub.u.Disown(sub.nc)
	for _, l := range sub.legs {
		l.u.Disown(l.nc)
	}
	<-sub.ended
	for _, l := range sub.legs {
		<-l.ended
	}
}

// legFailure is the session's error once a leg's relay ended on its own.
func (sub *subscriber) legFailure() error {
	for _, l := range sub.legs {
		select {
		case <-l.ended:
			return l.failure()
		default:
		}
	}
	return errClose
}
