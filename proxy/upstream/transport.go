package upstream

import (
	"context"

	"github.com/emqproxy/emqproxy/proxy/pipe"
)

// Kind is the kind of connection a session asks its Transport for.
type Kind uint8

// The kinds of connection to an upstream.
const (
	// KindShared is the shared connection for a client (by its id) in the
	// protocol: Shared's, nil while it is down.
	KindShared Kind = iota
	// KindReplaced is the shared connection that replaces Old (nil: the
	// first one, as the first RESP3 client opens the RESP3 connections),
	// waited for at most the dial timeout: Replaced's.
	KindReplaced
	// KindAwaitShared is the shared connection other than Old, waited
	// for while it is dialed again after a loss (across a failover, for
	// a Sentinel upstream): AwaitShared's.
	KindAwaitShared
	// KindOwn is a connection of one client's own, not yet a pipe (a
	// subscriber's): Own's, in Conn.Dialed.
	KindOwn
	// KindDedicated is a client's own pipelined connection with no reply
	// timeout (WATCH): Dedicated's.
	KindDedicated
	// KindBlocking is a dedicated connection for blocking commands, with
	// its id on the server in Conn.ID: BlockingPipe's.
	KindBlocking
	// KindIsolated is a heavy client's own connection with the shared
	// ones' timeouts: IsolatedPipe's.
	KindIsolated
)

// Request is what a session asks of a Transport.
type Request struct {
	Kind  Kind
	ID    uint64     // the client's id (the shared kinds)
	Proto int        // 2 or 3
	Old   *pipe.Pipe // the connection to replace (KindReplaced, KindAwaitShared)
}

// Conn is a connection a Transport gives: a pipe, or for KindOwn the
// dialed connection; ID is a blocking connection's id on the server.
type Conn struct {
	P      *pipe.Pipe
	Dialed Dialed
	ID     int64
}

// Transport gives a session its connections to an upstream: the one place
// a test, or another way to reach the servers, replaces them. A nil P (and
// Dialed.Conn) with a nil error means none in time for the shared kinds.
type Transport interface {
	Conn(ctx context.Context, u *Upstream, r Request) (Conn, error)
}

// Direct is the Transport of the upstreams' own connections: each kind
// is the method of Upstream named in its doc.
var Direct Transport = direct{}

// Via returns t, or Direct when t is nil: what every holder of an optional
// Transport asks (the sessions, the RESP3 bridge's legs, the tracking
// relays, CLIENT UNBLOCK).
func Via(t Transport) Transport {
	if t == nil {
		return Direct
	}
	return t
}

// OwnVia asks t (Via) for a connection of a client's own to u, dialed in
// protocol proto (KindOwn).
func OwnVia(ctx context.Context, t Transport, u *Upstream, proto int) (Dialed, error) {
	c, err := Via(t).Conn(ctx, u, Request{Kind: KindOwn, Proto: proto})
	return c.Dialed, err
}

// SharedVia asks t (Via) for u's shared connection for client id in
// protocol proto (KindShared): nil while it is down.
func SharedVia(ctx context.Context, t Transport, u *Upstream, id uint64, proto int) *pipe.Pipe {
	c, _ := Via(t).Conn(ctx, u, Request{Kind: KindShared, ID: id, Proto: proto})
	return c.P
}

type direct struct{}

func (direct) Conn(ctx context.Context, u *Upstream, r Request) (c Conn, err error) {
	switch r.Kind {
	case KindShared:
		c.P = u.Shared(r.ID, r.Proto)
	case KindReplaced:
		c.P = u.Replaced(ctx, r.ID, r.Proto, r.Old)
	case KindAwaitShared:
		c.P = u.AwaitShared(ctx, r.ID, r.Proto, r.Old)
	case KindOwn:
		c.Dialed, err = u.Own(ctx, r.Proto)
	case KindDedicated:
		c.P, err = u.Dedicated(ctx, r.Proto)
	case KindBlocking:
		c.P, c.ID, err = u.BlockingPipe(ctx, r.Proto)
	case KindIsolated:
		c.P, err = u.IsolatedPipe(ctx, r.Proto)
	}
	return c, err
}
