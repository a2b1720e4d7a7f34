package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/pipe"
)

// Reconnect backoff bounds. The ceiling is kept well under a second so
// that service resumes within a second of the upstream's return
// (verification.md, "Faults"); a refused dial on loopback costs little.
const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 500 * time.Millisecond
)

// Upstream is one upstream node: its shared pipelined connections, kept
// connected (and fenced) in the background, and a factory for the dedicated
// connections of blocking commands, WATCH and subscriptions.
type Upstream struct {
	name   string
	role   Role
	dialer dialer
	opts   Options
	log    *zap.Logger
	met    Metrics
	fol    *follower // a Sentinel upstream's (failover.go); nil for a fixed address
	ack    *ackSpec  // writes wait for replicas (ack.go); nil when AckReplicas is 0

	slots  []*slot                 // the RESP2 shared connections
	slots3 atomic.Pointer[[]*slot] // the RESP3 ones, opened for the first RESP3 client (resp3Slots)
	once3  sync.Once

	mu      sync.Mutex
	swapped chan struct{} // closed (and replaced) when a slot gets a new connection
	lastErr error
	fenceOK bool // the last connection attempt passed the fence (or there is none)

	probes atomic.Int64 // probes that passed the fence (probe.go)
	owned  ownedConns   // the connections of one client each it handed out (owned.go)

	clients *atomic.Int64 // the server's client connections (package pipe's spinFor)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// slot is one shared connection position, reconnected when it breaks.
type slot struct {
	cur  atomic.Pointer[pipe.Pipe]
	down atomic.Int64 // since when it has no connection (unix ns); 0 while it has one
}

// newSlot returns a slot without a connection yet.
func newSlot() *slot {
	s := &slot{}
	s.down.Store(time.Now().UnixNano())
	return s
}

// downSince is when the slot lost its connection (now while it has one:
// a connection found broken is not cleared yet).
func (s *slot) downSince() time.Time {
	if v := s.down.Load(); v != 0 {
		return time.Unix(0, v)
	}
	return time.Now()
}

// New starts connecting the shared connections in the background
// (and, for a Sentinel upstream, following its primary: failover.go).
// With keys set, the first connection that passes the fence also loads the
// node's command table into it (package cmdtable).
func New(opts Options, hook OnConnectFunc, keys *cmdtable.Store, clients *atomic.Int64, log *zap.Logger, met Metrics) (*Upstream, error) {
	log = log.With(zap.String("upstream", opts.Name))
	var fol *follower
	if opts.Sentinel != nil {
		var err error
		if fol, err = newFollower(opts, log); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	u := &Upstream{
		name:    opts.Name,
		role:    opts.Role,
		dialer:  dialer{opts: opts, hook: hook, keys: keys, keysDone: new(atomic.Bool), hello: new(helloStore), unsub: new(unsubProbe), fol: fol},
		opts:    opts,
		log:     log,
		met:     met,
		fol:     fol,
		ack:     newAckSpec(opts),
		clients: clients,
		slots:   make([]*slot, opts.Conns),
		ctx:     ctx,
		cancel:  cancel,
		swapped: make(chan struct{}),
	}
	u.lastErr = fmt.Errorf("%w: not connected yet", ErrUnavailable)
	for i := range u.slots {
		s := newSlot()
		u.slots[i] = s
		u.wg.Add(1)
		go u.keep(s, 2)
	}
	if u.ack != nil {
		u.startReads() // ack.go
	}
	u.wg.Add(1)
	go u.watch(watchInterval)
	if hook != nil && opts.ProbeInterval > 0 {
		u.wg.Add(1)
		go u.probe(opts.ProbeInterval)
	}
	if fol != nil {
		met.Follows(opts.Name) // the series exists from the start, at 0
		u.wg.Add(1)
		go u.follow()
	}
	return u, nil
}

// Options returns the options the upstream was made with, defaults
// applied.
func (u *Upstream) Options() Options { return u.opts }

// Acks reports whether the upstream's writes wait for its replicas
// (AckReplicas; ack.go).
func (u *Upstream) Acks() bool { return u.ack != nil }

// Sentinel reports whether the upstream follows a Sentinel master set's
// primary (failover.go) rather than a fixed address.
func (u *Upstream) Sentinel() bool { return u.fol != nil }

// HasHello reports whether the upstream's HELLO reply in protocol proto is
// known yet (dial.go).
func (u *Upstream) HasHello(proto int) bool { return u.dialer.hello.has(proto) }

// HelloReply is the server's reply to HELLO proto with the client's id in
// it, or nil while it is not known (dial.go).
func (u *Upstream) HelloReply(proto int, id int64) []byte { return u.dialer.hello.reply(proto, id) }

// Name returns the upstream's name.
func (u *Upstream) Name() string { return u.name }

// Role returns the upstream's role.
func (u *Upstream) Role() Role { return u.role }

// Up reports whether every shared connection is connected and fenced.
func (u *Upstream) Up() bool {
	for _, s := range u.slots {
		if s.cur.Load() == nil {
			return false
		}
	}
	return true
}

// Fenced reports whether the fence holds: the last connection attempt
// passed it (true when no fence hook is set) and the upstream is up.
func (u *Upstream) Fenced() bool {
	u.mu.Lock()
	ok := u.fenceOK
	u.mu.Unlock()
	return ok && u.Up()
}

// LastError returns why the upstream is not served: the error of the last
// failed connection, attempt or probe; nil while every shared connection is
// up and the fence holds.
func (u *Upstream) LastError() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fenceOK && u.Up() {
		return nil
	}
	return u.lastErr
}

// resp3Slots returns the RESP3 shared connections, starting them on first
// use: a node whose clients all speak RESP2 gets no idle RESP3 connections.
func (u *Upstream) resp3Slots() []*slot {
	u.once3.Do(func() {
		if u.ctx.Err() != nil {
			return
		}
		slots := make([]*slot, len(u.slots))
		for i := range slots {
			slots[i] = newSlot()
			u.wg.Add(1)
			go u.keep(slots[i], 3)
		}
		u.slots3.Store(&slots)
	})
	if p := u.slots3.Load(); p != nil {
		return *p
	}
	return nil
}

// allSlots returns every shared connection's slot, RESP2 and RESP3, and
// the replicas' probe and reads' connections (ack.go).
func (u *Upstream) allSlots() []*slot {
	out := u.slots
	if p := u.slots3.Load(); p != nil {
		out = append(out[:len(out):len(out)], *p...)
	}
	if u.ack != nil {
		for _, s := range []*slot{u.ack.slot.Load(), u.ack.reads} {
			if s != nil {
				out = append(out[:len(out):len(out)], s)
			}
		}
	}
	return out
}

// keep connects a slot in protocol proto (2 or 3) and reconnects it, with
// backoff, whenever it breaks.
func (u *Upstream) keep(s *slot, proto int) {
	defer u.wg.Done()
	wait := backoffMin
	for {
		dl, fenceErr, err := u.dialer.dial(u.ctx, proto)
		if u.ctx.Err() != nil {
			if err == nil {
				_ = dl.Conn.Close()
			}
			return
		}
		if err != nil {
			u.setState(err, !fenceErr)
			u.met.UpstreamError(u.name, errKind(err, fenceErr))
			u.log.Warn("upstream connection failed", zap.Error(err), zap.Duration("retry_in", wait))
			select {
			case <-time.After(wait):
			case <-u.ctx.Done():
				return
			}
			wait = min(wait*2, backoffMax)
			continue
		}
		wait = backoffMin
		p := u.pipeOn(dl, pipe.Options{Timeout: u.opts.Timeout, Clients: u.clients}) // failover.go
		s.cur.Store(p)
		s.down.Store(0)
		u.mu.Lock()
		close(u.swapped)
		u.swapped = make(chan struct{})
		u.mu.Unlock()
		u.setState(nil, true)
		u.met.UpstreamState(u.name, u.Up(), u.Fenced())
		u.log.Info("upstream connected", zap.String("address", dl.addr))
		if !u.Current(p) {
			p.Close() // the primary switched while it dialed (failover.go)
		}
		select {
		case <-p.Dead():
		case <-u.ctx.Done():
			p.Close()
			<-p.Dead()
			s.cur.Store(nil)
			return
		}
		s.down.Store(time.Now().UnixNano())
		s.cur.Store(nil)
		err = p.Failed()
		if u.fol != nil {
			u.fol.failed(p.Addr(), err)
		}
		u.lost(err)
		u.met.UpstreamError(u.name, errKind(err, false))
		u.met.Reconnect(u.name)
		u.log.Warn("upstream connection lost", zap.Error(err))
	}
}

// setState records the outcome of a connection attempt or a loss.
func (u *Upstream) setState(err error, fenceOK bool) {
	u.mu.Lock()
	if err != nil {
		u.lastErr = err
	}
	u.fenceOK = fenceOK
	u.mu.Unlock()
	u.met.UpstreamState(u.name, u.Up(), u.Fenced())
}

// lost records the loss of a shared connection. It says nothing about the
// fence: when a probe found the fence broken (and closed the connection),
// its verdict and its error stand until a new connection passes the fence.
func (u *Upstream) lost(err error) {
	u.mu.Lock()
	if u.fenceOK && err != nil {
		u.lastErr = err
	}
	u.mu.Unlock()
	u.met.UpstreamState(u.name, u.Up(), u.Fenced())
}

// errKind names an error for the upstream error metric.
func errKind(err error, fence bool) string {
	switch {
	case fence || errors.Is(err, ErrFence):
		return "fence"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrNoPrimary):
		return "discovery"
	case errors.Is(err, ErrNotPrimary):
		return "role"
	case errors.Is(err, ErrBoot):
		return "boot"
	case errors.Is(err, ErrUpstreamProtocol):
		return "protocol"
	case errors.Is(err, ErrLost):
		return "lost"
	}
	return "dial"
}

// Shared returns the shared connection for a client (by its id) in
// protocol proto, or nil when it is down.
func (u *Upstream) Shared(id uint64, proto int) *pipe.Pipe {
	if s := u.slotFor(id, proto); s != nil {
		return s.cur.Load()
	}
	return nil
}

// slotFor returns the shared connection's slot for a client (by its id)
// in protocol proto (nil: the RESP3 ones could not start).
func (u *Upstream) slotFor(id uint64, proto int) *slot {
	slots := u.slots
	if proto == 3 {
		if slots = u.resp3Slots(); len(slots) == 0 {
			return nil
		}
	}
	if len(slots) == 1 {
		return slots[0]
	}
	return slots[id%uint64(len(slots))]
}

// Replaced waits, at most the dial timeout, for the shared connection in
// protocol proto that replaces old (nil: the first one) for a client (by
// its id), and returns it; nil when none comes in time.
func (u *Upstream) Replaced(ctx context.Context, id uint64, proto int, old *pipe.Pipe) *pipe.Pipe {
	return u.replacedUntil(ctx, id, proto, old, time.Now().Add(u.opts.DialTimeout))
}

// replacedUntil is replaced, waiting until deadline at most.
func (u *Upstream) replacedUntil(ctx context.Context, id uint64, proto int, old *pipe.Pipe, deadline time.Time) *pipe.Pipe {
	var timeout <-chan time.Time
	for {
		u.mu.Lock()
		swapped := u.swapped
		u.mu.Unlock()
		if p := u.Shared(id, proto); p != nil && p != old {
			return p
		}
		if timeout == nil {
			left := time.Until(deadline)
			if left <= 0 {
				return nil
			}
			t := time.NewTimer(left)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-swapped:
		case <-timeout:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// watchInterval is how often an idle shared connection is checked for a
// close by the server (pipe.Pipe.CheckIdle): nobody reads an idle connection,
// and this starts the reconnect without waiting for the next command.
const watchInterval = 100 * time.Millisecond

// watch checks the idle shared connections every interval until the
// upstream closes.
func (u *Upstream) watch(every time.Duration) {
	u.every(every, func() {
		for _, s := range u.allSlots() {
			if p := s.cur.Load(); p != nil {
				p.CheckIdle()
			}
		}
	})
}

// every runs f every interval until the upstream closes; the caller added
// to u.wg.
func (u *Upstream) every(interval time.Duration, f func()) {
	defer u.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-u.ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// Unavailable is the reply a command gets while the upstream is down: a
// Sentinel upstream that lost its primary says it has none (failover.go);
// a fence refusal, and a fixed address, say unavailable.
func (u *Upstream) Unavailable() []byte { return clienterr.Reply(u.UnavailableError()) }

// UnavailableError is the error Unavailable tells, wrapping the last
// failure (LastError), if any.
func (u *Upstream) UnavailableError() error {
	u.mu.Lock()
	fenceOK := u.fenceOK
	u.mu.Unlock()
	err := u.LastError()
	reason := "not connected"
	if err != nil {
		reason = err.Error()
	}
	if u.fol != nil && fenceOK {
		return noPrimary(u.name, reason, err)
	}
	return pipe.Unavailable(u.name, reason, err)
}

// Close stops reconnecting and closes the shared connections; waiting
// batches get the lost error. A Sentinel upstream's resolver stops.
func (u *Upstream) Close() {
	u.cancel()
	u.wg.Wait()
	if u.fol != nil {
		u.fol.res.Close()
	}
}

// Readiness returns nil while u is served (connected and fenced), else the
// reason it is not: the error of its last failed connection, attempt or
// probe.
func (u *Upstream) Readiness() error {
	if u.Fenced() {
		return nil
	}
	if err := u.LastError(); err != nil {
		return err
	}
	return fmt.Errorf("%w: not fenced", ErrUnavailable)
}
