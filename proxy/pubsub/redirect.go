package pubsub

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
)

// RESP2 client-side caching's redirects (package tracking says what the
// proxy does, and opens and closes them): a tracking client's REDIRECT
// <id> names a session of the proxy's, which no server knows, so on each
// upstream the proxy opens a connection of its own for the tracking
// client, subscribed to __redis__:invalidate, and names that connection's
// id to the server. A RedirConn relays each invalidation message it gets
// to the session the client named, the way its own messages go to it (the
// target's Subscriber's writer).

// invalidateMsg is the head of a RESP2 invalidation message.
var invalidateMsg = []byte("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n")

// invalidatePush is the head of a RESP3 invalidation push.
var invalidatePush = []byte(">2\r\n$10\r\ninvalidate\r\n")

// RedirConn is a connection of the proxy's own, subscribed to
// __redis__:invalidate, that a tracking client's connections to its
// upstream redirect to; it relays to the session Target.
type RedirConn struct {
	U      *upstream.Upstream
	nc     net.Conn
	ID     int64 // its id on the server
	Target uint64
	rr     resp.Reader
	owner  *Client     // the tracking client
	done   atomic.Bool // closed by its tracking client, or its target ended
}

// Redirects is the server's registry for the relays: the sessions that
// can be pushed to (in subscribe mode, or bridged), and the relays to each
// session, closed when it ends.
type Redirects struct {
	// Max caps one relayed message (the proxy's Options.MaxReplyBytes);
	// set before the first relay.
	Max int
	// Transport gives the relays' connections (upstream.Via: nil is
	// Direct); set before the first relay.
	Transport upstream.Transport

	mu    sync.Mutex
	subs  map[uint64]*Subscriber
	conns map[uint64]map[*RedirConn]struct{}
	ended map[uint64]struct{} // ended, and still listed by the server (End to Forget)
}

// Attach notes that session id is pushed to through sub.
func (r *Redirects) Attach(id uint64, sub *Subscriber) {
	r.mu.Lock()
	if r.subs == nil {
		r.subs = map[uint64]*Subscriber{}
	}
	r.subs[id] = sub
	r.mu.Unlock()
}

// Detach undoes Attach.
func (r *Redirects) Detach(id uint64, sub *Subscriber) {
	r.mu.Lock()
	if r.subs[id] == sub {
		delete(r.subs, id)
	}
	r.mu.Unlock()
}

// Ended reports whether session id ended (it may still be listed).
func (r *Redirects) Ended(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, gone := r.ended[id]
	return gone
}

// sub returns the subscriber session id is pushed to now, or nil.
func (r *Redirects) sub(id uint64) *Subscriber {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subs[id]
}

// add registers a relay to its target; false when the target has ended.
func (r *Redirects) add(rc *RedirConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, gone := r.ended[rc.Target]; gone {
		return false
	}
	if r.conns == nil {
		r.conns = map[uint64]map[*RedirConn]struct{}{}
	}
	m := r.conns[rc.Target]
	if m == nil {
		m = map[*RedirConn]struct{}{}
		r.conns[rc.Target] = m
	}
	m[rc] = struct{}{}
	return true
}

// remove forgets a relay closed by its tracking client.
func (r *Redirects) remove(rc *RedirConn) {
	r.mu.Lock()
	delete(r.conns[rc.Target], rc)
	if len(r.conns[rc.Target]) == 0 {
		delete(r.conns, rc.Target)
	}
	r.mu.Unlock()
}

// End closes the relays to session id, which ended: the server finds their
// tracking clients' redirect broken. Until Forget, id stays ended, so no
// relay to it is opened while the server still lists it.
//
// End and Forget touch only id's entries: a burst of sessions ending at
// once (a client fleet restarting, a churn of connections) costs each of
// them the same, however many others are ending beside it.
func (r *Redirects) End(id uint64) {
	r.mu.Lock()
	conns := r.conns[id]
	delete(r.conns, id)
	if r.ended == nil {
		r.ended = map[uint64]struct{}{}
	}
	r.ended[id] = struct{}{}
	r.mu.Unlock()
	for rc := range conns {
		rc.done.Store(true) // its tracking client stays, the redirect broken
		rc.U.Disown(rc.nc)
	}
}

// Forget drops session id's mark once the server no longer lists it: an
// id is never given again, and a relay's target that is not listed is
// refused on that ground (package tracking's alive).
func (r *Redirects) Forget(id uint64) {
	r.mu.Lock()
	delete(r.ended, id)
	r.mu.Unlock()
}

// Open opens owner's relay to session target on u (an owned connection,
// its id asked, subscribed to __redis__:invalidate), registers it and
// starts it; nil when target has ended (alive: whether it is live now) or
// the connection cannot be opened.
func (r *Redirects) Open(ctx context.Context, owner *Client, u *upstream.Upstream, target uint64, alive func() bool) *RedirConn {
	rc, err := openRedir(ctx, r.Transport, u, target)
	if err != nil {
		owner.Log.Warn("tracking redirect connection failed", zap.String("upstream", u.Name()), zap.Error(err))
		return nil
	}
	if !r.add(rc) {
		u.Disown(rc.nc)
		return nil
	}
	if !alive() { // ended while the connection opened
		rc.Close(r)
		return nil
	}
	rc.owner = owner
	go rc.relay(r)
	return rc
}

// openRedir opens a relay to target on u: an owned connection, its id
// asked, subscribed to __redis__:invalidate.
func openRedir(ctx context.Context, t upstream.Transport, u *upstream.Upstream, target uint64) (*RedirConn, error) {
	dl, err := upstream.OwnVia(ctx, t, u, 2)
	if err != nil {
		return nil, err
	}
	sc := &upstream.SetupConn{Conn: dl.Conn, RR: resp.NewReader(dl.Buf)}
	cctx, cancel := context.WithTimeout(ctx, u.Options().DialTimeout)
	defer cancel()
	r, err := sc.Do(cctx, "CLIENT", "ID")
	if err == nil {
		_, err = sc.Raw(cctx, "SUBSCRIBE", "__redis__:invalidate")
	}
	if err != nil {
		u.Disown(dl.Conn)
		return nil, err
	}
	// The reader goes with the connection: its buffer may hold bytes.
	return &RedirConn{U: u, nc: dl.Conn, ID: r.Int, Target: target, rr: sc.RR}, nil
}

// Done reports whether the relay ended (its target did).
func (rc *RedirConn) Done() bool { return rc.done.Load() }

// Close ends the relay and forgets it.
func (rc *RedirConn) Close(r *Redirects) {
	rc.done.Store(true)
	r.remove(rc)
	rc.U.Disown(rc.nc)
}

// relay hands each invalidation message the connection gets to the
// session target, as the server sends one to a redirect target (see
// above), until the connection closes. When it closes but not by its
// tracking client (the upstream's fence failed, the server closed it),
// the tracking client is closed: its invalidations would be lost, and a
// client whose connection broke drops its cache.
func (rc *RedirConn) relay(r *Redirects) {
	defer func() {
		if !rc.done.Load() {
			r.remove(rc)
			rc.owner.Log.Warn("a tracking client's redirect connection broke; closing the client, which drops its cache",
				zap.String("upstream", rc.U.Name()))
			_ = rc.owner.Conn.Close()
		}
	}()
	var fr []byte
	for {
		var over bool
		var err error
		fr, over, err = rc.rr.Read(fr[:0], r.Max)
		if err != nil || over {
			rc.U.Disown(rc.nc)
			return
		}
		if !bytes.HasPrefix(fr, invalidateMsg) {
			continue
		}
		sub := r.sub(rc.Target)
		if sub == nil {
			continue // not in subscribe mode: the server sends nothing
		}
		msg := fr
		if sub.RESP3 {
			body := fr[len(invalidateMsg):]
			if bytes.Equal(body, []byte("*-1\r\n")) {
				body = []byte("_\r\n")
			}
			msg = append(append([]byte(nil), invalidatePush...), body...)
		} else if !sub.c.Subs.Any() {
			continue
		}
		if err := sub.w.push(msg); err != nil && err != errSubscriberGone {
			// Over its limit: closed, as the server closes a client over
			// its output buffer limit.
			_ = sub.c.Conn.Close()
		}
	}
}
