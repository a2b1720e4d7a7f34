package upstream

import (
	"context"
	"sync/atomic"

	"github.com/emqproxy/emqproxy/rewrite"
)

// The unsubscribe family outside subscribe mode.
//
// Outside subscribe mode, UNSUBSCRIBE, PUNSUBSCRIBE and SUNSUBSCRIBE answer
// one reply per channel on Redis 7.0 (so they cannot travel on a shared
// connection, whose replies are counted one per command) and one NOSUB
// error on Valkey 8. rewrite/ answers them as the server does
// (rewrite.State.NoSub); what the server does is asked once per upstream,
// on its first connection that passes the fence: the three commands with
// no argument, which leave a connection that is not subscribed as it was
// and get one reply each on either server. An error reply (NOSUB, or the
// upstream user's NOPERM) is what the client then gets, whatever channels
// it names; any other reply means the server answers per channel. Until
// the first connection has answered, the commands get the upstream's
// unavailable error.

// unsubProbe is what an upstream answered to the unsubscribe family.
type unsubProbe struct {
	done atomic.Bool
	ns   atomic.Pointer[rewrite.NoSub] // nil: per channel for all three
}

// probe asks the server on a new connection, once.
func (p *unsubProbe) probe(ctx context.Context, sc *SetupConn) error {
	if p.done.Load() {
		return nil
	}
	var ns rewrite.NoSub
	refuses := false
	for _, c := range []struct {
		name string
		to   *[]byte
	}{{"UNSUBSCRIBE", &ns.Unsubscribe}, {"PUNSUBSCRIBE", &ns.PUnsubscribe}, {"SUNSUBSCRIBE", &ns.SUnsubscribe}} {
		raw, err := sc.Raw(ctx, c.name)
		if err != nil {
			return err
		}
		if raw[0] == '-' {
			*c.to, refuses = raw, true
		}
	}
	if refuses {
		p.ns.Store(&ns)
	}
	p.done.Store(true)
	return nil
}

// NoSub is rewrite.State.NoSub for commands routed to u.
func (u *Upstream) NoSub() *rewrite.NoSub {
	p := u.dialer.unsub
	if p == nil {
		return nil
	}
	if !p.done.Load() {
		r := u.Unavailable()
		return &rewrite.NoSub{Unsubscribe: r, PUnsubscribe: r, SUnsubscribe: r}
	}
	return p.ns.Load()
}
