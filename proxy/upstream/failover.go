package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/discovery"
	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/resp"
)

// Following a primary under Sentinel.
//
// An upstream with Options.Sentinel has no fixed address: a
// discovery.Resolver follows the master set's primary (it asks the
// sentinels, checks ROLE, listens for +switch-master), and the upstream's
// follower ties it to the data path:
//
//   - Every connection the upstream opens (shared, dedicated, the probe's)
//     is dialed at the resolver's last confirmed primary; after a failed
//     connection to that address the dial asks the sentinels afresh
//     (Resolver.Resolve) instead, within the dial timeout.
//   - Every such connection checks ROLE after AUTH and SELECT and before
//     the fence: a node that answers anything but master is refused
//     (ErrNotPrimary), whatever the sentinels said a moment before. The
//     fence (OnConnect: the wire-6 check of a module node, the wire-4 brand
//     of a scripts node) then runs on the new primary before any client
//     byte reaches it, as on every connection: a replica promoted from
//     another fleet's node fails it, and the upstream is not served.
//   - A failed dial, a connection lost, and a -READONLY or -LOADING reply
//     (the reply reader looks at the first bytes of top-level error
//     replies only) report the address to the resolver, which asks again
//     at once (a +switch-master message can be missed).
//   - When the resolver confirms another primary, the shared connections
//     to the old one are closed: every command written to it whose reply
//     has not arrived gets the lost error ("the command may have been
//     applied"), nothing is resent, and the connections reconnect to the
//     new primary. A client's own connection (WATCH, blocking commands) to
//     the old primary is not reused for its next command.
//   - A new command that finds no shared connection (or that needs a
//     connection of its own, owned.go, while the upstream is down) waits
//     for the new primary, at most FailoverWait from the moment the
//     connection was lost, then gets `-UPSTREAM <name> has no primary: <reason>`; once
//     that much time has passed, commands get the error at once until a
//     primary is connected again. A fence refusal is no failover: commands
//     get its error at once.
//
// What is written by hand, and why: the data path frames replies byte for
// byte on connections of its own (package pipe), so it needs the primary's
// address, not a client; valkey-go's Sentinel support is used where the
// proxy speaks as a client (the control loop, proxy's control.go, and the queue
// mover: package control/table's Dial with NodeOptions.Sentinel).

// follower ties a Sentinel upstream's connections to its resolver.
type follower struct {
	res  *discovery.Resolver
	wait time.Duration // Options.FailoverWait
	log  *zap.Logger

	mu   sync.Mutex
	lost string // the address whose last connection failed; a dial then asks again
}

// newFollower starts a resolver for o's master set, reaching the data
// nodes with o's own credentials.
func newFollower(o Options, log *zap.Logger) (*follower, error) {
	so := *o.Sentinel
	so.Node = discovery.NodeAuth{Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig}
	if so.DialTimeout == 0 {
		so.DialTimeout = o.DialTimeout
	}
	r, err := discovery.New(so, log)
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %s: %w", ErrOptions, o.Name, err)
	}
	return &follower{res: r, wait: max(o.FailoverWait, 0), log: log}, nil
}

// address returns the address a new connection dials: the last confirmed
// primary, or, before the first one and after a failed connection to it,
// the one a fresh attempt confirms (waiting at most until ctx is done).
func (f *follower) address(ctx context.Context) (string, error) {
	addr := f.res.Primary()
	f.mu.Lock()
	stale := addr == "" || addr == f.lost
	f.mu.Unlock()
	if !stale {
		return addr, nil
	}
	addr, err := f.res.Resolve(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoPrimary, err)
	}
	return addr, nil
}

// failed records a failed connection to addr (a dial, a boot, a role, a
// connection lost) and has the resolver ask again.
func (f *follower) failed(addr string, err error) {
	f.mu.Lock()
	first := f.lost != addr
	f.lost = addr
	f.mu.Unlock()
	if first && addr == f.res.Primary() {
		f.log.Warn("upstream primary lost; asking the sentinels", zap.String("address", addr), zap.Error(err))
	}
	f.res.ReportFailure(addr)
}

// connected records a connection to addr that passed the role and the fence.
func (f *follower) connected(addr string) {
	f.mu.Lock()
	if f.lost == addr {
		f.lost = ""
	}
	f.mu.Unlock()
}

// current reports whether addr is the primary confirmed last.
func (f *follower) current(addr string) bool { return f.res.Primary() == addr }

// The error replies that tell a connection's node is no primary (now).
var (
	replyReadonly = []byte("-READONLY ")
	replyLoading  = []byte("-LOADING ")
)

// errReply is a pipe's hook for the top-level error replies read from
// addr: a -READONLY or -LOADING reports the primary lost. It runs in the
// pipe's reader and never blocks; the reply reaches its client unchanged.
func (f *follower) errReply(addr string) func([]byte) {
	return func(r []byte) {
		if bytes.HasPrefix(r, replyReadonly) || bytes.HasPrefix(r, replyLoading) {
			f.failed(addr, errors.New(string(bytes.TrimSpace(r[:min(len(r), 64)]))))
		}
	}
}

// checkRole sends ROLE on a new connection and refuses a node that does
// not answer master.
func checkRole(ctx context.Context, c *SetupConn, addr string) error {
	r, err := c.Do(ctx, "ROLE")
	if err != nil {
		return fmt.Errorf("%w: ROLE: %w", ErrBoot, err)
	}
	if r.IsError() {
		return fmt.Errorf("%w: ROLE: %s", ErrBoot, r.Str)
	}
	if r.Type != '*' || len(r.Elems) == 0 {
		return fmt.Errorf("%w: ROLE answered no array", ErrUpstreamProtocol)
	}
	if role := r.Elems[0].Str; role != "master" {
		return fmt.Errorf("%w: %s answers ROLE %s", ErrNotPrimary, addr, resp.OneLine(role))
	}
	return nil
}

// pipeOn makes the Pipe over dl, a new connection to the node at dl.addr,
// with o (its reply timeout, what ends it, its reader) and what every
// connection of the upstream gets: its name, the shared connections' write
// timeout, and what following needs (its address, the error-reply hook).
func (u *Upstream) pipeOn(dl Dialed, o pipe.Options) *pipe.Pipe {
	o.Name, o.Addr, o.WriteTimeout = u.name, dl.addr, u.opts.Timeout
	o.MaxCombinedWrites = u.opts.MaxCombinedWrites
	if u.fol != nil {
		o.OnError = u.fol.errReply(dl.addr)
	}
	return pipe.New(dl.Conn, dl.Buf, o)
}

// Current reports whether p goes to the upstream's node: always for a
// fixed address; for a Sentinel upstream, p's address is the primary
// confirmed last.
func (u *Upstream) Current(p *pipe.Pipe) bool { return u.fol == nil || u.fol.current(p.Addr()) }

// follow watches the resolver and acts on every change of primary until
// the upstream closes.
func (u *Upstream) follow() {
	defer u.wg.Done()
	addr, changed := u.fol.res.Watch()
	if addr != "" {
		u.switched("", addr)
	}
	for {
		select {
		case <-u.ctx.Done():
			return
		case <-changed:
		}
		old := addr
		addr, changed = u.fol.res.Watch()
		if addr != old {
			u.switched(old, addr)
		}
	}
}

// switched records the new primary and closes the shared connections to
// any other node: their commands in flight get the lost error, and the
// connections reconnect to the new primary.
func (u *Upstream) switched(old, addr string) {
	u.met.Primary(u.name, old, addr)
	if old == "" {
		u.log.Info("upstream primary found", zap.String("primary", addr))
		return
	}
	u.met.Failover(u.name)
	if u.ack != nil {
		// The new primary's replicas are unknown (its old peer may be the
		// node that died): one probe at a time until a WAIT confirms them.
		u.ack.setShort("the primary switched to " + addr + ", whose replicas no WAIT has confirmed yet")
	}
	closed := 0
	for _, s := range u.allSlots() {
		if p := s.cur.Load(); p != nil && p.Addr() != addr {
			p.Close()
			closed++
		}
	}
	// The connections of one client each (WATCH pins, blocking,
	// subscribed and bridged clients: owned.go) were all opened to the
	// old primary, or while it was still the one confirmed.
	closed += u.owned.closeAll()
	u.log.Warn("upstream primary switched", zap.String("from", old), zap.String("to", addr),
		zap.Int("connections_closed", closed))
}

// AwaitShared waits for the shared connection in protocol proto for a
// client (by its id), other than old, while it has none because the
// connection was lost and is being dialed again (keep). It waits at most,
// from the moment the slot lost its connection, FailoverWait for a
// Sentinel upstream (see follower) and the dial timeout for a fixed
// address: a command that comes a moment after the server closed the
// connection goes on its replacement, as it would on a connection of its
// own, while a node down for longer fails its commands at once. nil when
// the wait is over, the slot never had a connection (a fixed address), or
// the fence refused the node.
func (u *Upstream) AwaitShared(ctx context.Context, id uint64, proto int, old *pipe.Pipe) *pipe.Pipe {
	wait := u.opts.DialTimeout
	if u.fol != nil {
		wait = u.fol.wait
	}
	if wait <= 0 {
		return nil
	}
	u.mu.Lock()
	fenceOK := u.fenceOK
	u.mu.Unlock()
	if !fenceOK {
		return nil
	}
	s := u.slotFor(id, proto)
	if s == nil || u.fol == nil && s.down.Load() == 0 {
		return nil
	}
	return u.replacedUntil(ctx, id, proto, old, s.downSince().Add(wait))
}

// awaitPrimary waits, as awaitShared does, until a Sentinel upstream that
// lost its primary is connected to the new one: a client's own connection
// (owned.go) is opened only while the fence holds.
func (u *Upstream) awaitPrimary(ctx context.Context) {
	if u.fol != nil {
		u.AwaitShared(ctx, 0, 2, nil)
	}
}

// noPrimary is the error a new command gets when a Sentinel upstream has
// no primary, for reason (cause's text, or what stands for it):
// `-UPSTREAM <name> has no primary: <reason>`.
func noPrimary(name, reason string, cause error) *clienterr.Error {
	return clienterr.Wrap(clienterr.Upstream, name+" has no primary: "+reason, cause)
}
