package upstream

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/resp"
)

// Owned connections.
//
// Besides its shared connections an upstream hands out connections of one
// client each: a WATCH pin and a blocking command's connection (a
// dedicated pipe), and a subscribed or bridged RESP3 client's connection
// (package session's subscribe.go, package pubsub). They are opened the one way a shared connection is:
// only while the fence holds, dialed, booted and fenced by the dialer. The
// upstream keeps every one it handed out in its registry until its holder
// lets it go, so a probe that finds the fence broken (probe.go) closes them
// all with the shared ones: a pinned client's next command, its EXEC
// included, gets the upstream's fence error, and nothing more of it reaches
// the node. A connection whose dial was under way when the fence failed is
// closed as it registers.

// ownedConns is an upstream's registry of the connections it handed out.
type ownedConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	gen   uint64 // bumped by every closeAll
}

// begin returns the generation a new connection registers under.
func (o *ownedConns) begin() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gen
}

// add registers nc, dialed under generation gen; false (nc not kept) when
// a failed fence closed the registry since.
func (o *ownedConns) add(gen uint64, nc net.Conn) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if gen != o.gen {
		return false
	}
	if o.conns == nil {
		o.conns = map[net.Conn]struct{}{}
	}
	o.conns[nc] = struct{}{}
	return true
}

// remove forgets nc once its holder closed it.
func (o *ownedConns) remove(nc net.Conn) {
	o.mu.Lock()
	delete(o.conns, nc)
	o.mu.Unlock()
}

// closeAll closes every registered connection and makes the dials under
// way close theirs.
func (o *ownedConns) closeAll() int {
	o.mu.Lock()
	conns := o.conns
	o.conns = nil
	o.gen++
	o.mu.Unlock()
	for nc := range conns {
		_ = nc.Close()
	}
	return len(conns)
}

// len is how many connections the upstream has handed out and not got back.
func (o *ownedConns) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.conns)
}

// Own opens a connection of one client's own in protocol proto, through
// the fence check every connection passes, and registers it; the holder
// gives it back with disown.
func (u *Upstream) Own(ctx context.Context, proto int) (Dialed, error) {
	if !u.Fenced() {
		u.awaitPrimary(ctx) // failover.go: a Sentinel upstream's new primary
	}
	if !u.Fenced() {
		return Dialed{}, fmt.Errorf("%w: %w", ErrUnavailable, u.notServed())
	}
	gen := u.owned.begin()
	dl, fenceErr, err := u.dialer.dial(ctx, proto)
	if err != nil && !fenceErr && u.fol != nil && u.fol.wait > 0 {
		dl, fenceErr, err = u.redialPrimary(ctx, proto, err) // failover.go's wait, for a connection of one's own
	}
	if err != nil {
		u.met.UpstreamError(u.name, errKind(err, fenceErr))
		return Dialed{}, err
	}
	if !u.owned.add(gen, dl.Conn) {
		_ = dl.Conn.Close()
		return Dialed{}, fmt.Errorf("%w: %w", ErrUnavailable, u.notServed())
	}
	return dl, nil
}

// Disown closes an owned connection and forgets it.
func (u *Upstream) Disown(nc net.Conn) {
	u.owned.remove(nc)
	_ = nc.Close()
}

// notServed is why the upstream is not served now.
func (u *Upstream) notServed() error {
	if err := u.LastError(); err != nil {
		return err
	}
	return ErrFence
}

// Serves reports whether p, a connection of a client's own to u, may
// still carry its commands: it has not failed, u's fence holds, and p goes
// to u's node (a Sentinel upstream's current primary).
func (u *Upstream) Serves(p *pipe.Pipe) bool {
	return p.Failed() == nil && u.Fenced() && u.Current(p)
}

// Dedicated opens a connection of the client's own (blocking commands,
// WATCH) in protocol proto, owned (see above), with no reply timeout (its
// writes have the shared ones' timeout). Closing the pipe gives it back.
func (u *Upstream) Dedicated(ctx context.Context, proto int) (*pipe.Pipe, error) {
	dl, err := u.Own(ctx, proto)
	if err != nil {
		return nil, err
	}
	p := u.pipeOn(dl, pipe.Options{OnDead: func(error) { u.owned.remove(dl.Conn) }, Background: true}) // failover.go
	return p, nil
}

// BlockingPipe is dedicated for a blocking command's connection, with the
// connection's id on the server (CLIENT ID, asked as it opens; 0 when the
// server does not answer it): CLIENT UNBLOCK of the session names it
// (package clients' kill.go).
func (u *Upstream) BlockingPipe(ctx context.Context, proto int) (*pipe.Pipe, int64, error) {
	dl, err := u.Own(ctx, proto)
	if err != nil {
		return nil, 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, u.opts.DialTimeout)
	r, err := (&SetupConn{Conn: dl.Conn, RR: resp.NewReader(dl.Buf)}).Do(cctx, "CLIENT", "ID")
	cancel()
	if err != nil {
		u.Disown(dl.Conn)
		return nil, 0, err
	}
	p := u.pipeOn(dl, pipe.Options{OnDead: func(error) { u.owned.remove(dl.Conn) }, Background: true}) // failover.go
	return p, r.Int, nil
}

// IsolatedPipe opens the connection of one heavy client's own (package session's share.go) in
// protocol proto, owned (see above), with the shared connections' reply
// and write timeouts, and read inline by its session as a shared
// connection is. Closing the pipe gives it back.
func (u *Upstream) IsolatedPipe(ctx context.Context, proto int) (*pipe.Pipe, error) {
	dl, err := u.Own(ctx, proto)
	if err != nil {
		return nil, err
	}
	p := u.pipeOn(dl, pipe.Options{Timeout: u.opts.Timeout, OnDead: func(error) { u.owned.remove(dl.Conn) }}) // failover.go
	return p, nil
}

// redialPrimary dials a Sentinel upstream's next primary after a dial of
// the one it knew failed (the primary died before the upstream noticed):
// nothing was sent, so it dials again until a primary answers, at most
// until FailoverWait from when the upstream lost its shared connection (or
// from now), as a command on a shared connection waits for the next
// primary (awaitShared). The dial asks the sentinels (the failed address
// was reported by the dial that failed).
func (u *Upstream) redialPrimary(ctx context.Context, proto int, err error) (Dialed, bool, error) {
	deadline := time.Now().Add(u.fol.wait)
	if s := u.slotFor(0, 2); s != nil {
		deadline = s.downSince().Add(u.fol.wait)
	}
	for time.Now().Before(deadline) {
		t := time.NewTimer(redialEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return Dialed{}, false, err
		case <-t.C:
		}
		dctx, cancel := context.WithDeadline(ctx, deadline)
		dl, fenceErr, derr := u.dialer.dial(dctx, proto)
		cancel()
		if derr == nil || fenceErr {
			return dl, fenceErr, derr
		}
		err = derr
	}
	return Dialed{}, false, err
}

// redialEvery paces redialPrimary's dials (each also waits, inside the
// dial, for the sentinels to name a primary).
const redialEvery = 50 * time.Millisecond
