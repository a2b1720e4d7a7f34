package session

import (
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/upstream"
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

// flushCaching adds a kept CLIENT CACHING to the commands gathered for the
// current leg.
func (s *session) flushCaching(out *[]byte) {
	if sub := s.sub; len(sub.Caching) > 0 {
		*out = append(*out, sub.Caching...)
		sub.Caching = sub.Caching[:0]
	}
}

// legFor returns the leg to u (nil: the default route's, the bridge's
// first connection), opening it when needed.
func (s *session) legFor(u *upstream.Upstream) (*pubsub.Subscriber, error) {
	sub := s.sub
	if l := sub.Leg(u); l != nil {
		return l, nil
	}
	dl, err := u.Own(s.srv.Ctx, 3) // upstream/owned.go
	if err != nil {
		s.log.Warn("bridge upstream connection failed", zap.String("upstream", u.Name()), zap.Error(err))
		return nil, err
	}
	return sub.OpenLeg(u, dl) // named with the barrier's nonce, tracking as the client asked
}

// toLeg makes l the leg the gathered commands go to: what was gathered for
// the current one is sent, and its replies handed to the client, first.
func (s *session) toLeg(out *[]byte, l *pubsub.Subscriber) error {
	if s.sub.Cur == l {
		return nil
	}
	if err := s.bridgeBarrier(out); err != nil {
		return err
	}
	s.sub.Cur = l
	return nil
}

// toOtherLegs sends raw, a CLIENT TRACKING the client sent, to every open
// leg but the current one (which got it), their replies dropped. Those legs
// are idle: every reply of theirs was handed on when the bridge left them.
func (s *session) toOtherLegs(raw []byte) error {
	sub := s.sub
	for _, l := range sub.Legs() {
		if l == sub.Cur {
			continue
		}
		l.Swap(nil)
		if err := l.Send(raw); err != nil {
			return err
		}
	}
	return nil
}
