package discovery

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
)

// Resolver follows one master set's primary. Its methods are safe for
// concurrent use. One goroutine makes every attempt (asks the sentinels,
// checks ROLE), so any number of callers asking at once costs one
// attempt; one goroutine per sentinel keeps its subscription.
type Resolver struct {
	opts   Options
	log    *zap.Logger
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{} // buffered: an attempt is wanted

	mu         sync.Mutex
	primary    string        // the last confirmed primary, "" before the first
	changed    chan struct{} // closed when primary changes
	tick       chan struct{} // closed when an attempt finishes
	started    uint64        // number of the attempt running or last run
	confirmed  uint64        // number of the last attempt that confirmed a primary
	lastErr    error         // why the last attempt failed (nil after a success)
	hint       string        // the address of the last +switch-master message, not yet checked
	subscribed map[string]bool

	failovers atomic.Uint64
	refusals  atomic.Uint64

	// Owned by the attempt goroutine.
	order      []string                 // sentinels, the one that answered last first
	clients    map[string]valkey.Client // a client per sentinel, made when first needed
	roleClient valkey.Client            // to roleAddr, the last candidate that passed ROLE
	roleAddr   string
}

// New validates opts and starts following the master set: it subscribes
// to every sentinel and makes a first attempt at once, without waiting
// for either; Resolve waits for a confirmed primary. logger is the
// operational log (nil: no logging). Close stops it.
func New(opts Options, logger *zap.Logger) (*Resolver, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if logger == nil {
		logger = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Resolver{
		opts:       opts,
		log:        logger.Named("discovery").With(zap.String("master", opts.Master)),
		ctx:        ctx,
		cancel:     cancel,
		kick:       make(chan struct{}, 1),
		changed:    make(chan struct{}),
		tick:       make(chan struct{}),
		subscribed: make(map[string]bool, len(opts.Addresses)),
		order:      opts.Addresses,
		clients:    make(map[string]valkey.Client, len(opts.Addresses)),
	}
	r.wg.Add(1 + len(opts.Addresses))
	go r.loop()
	for _, addr := range opts.Addresses {
		go r.subscription(addr)
	}
	r.Kick()
	return r, nil
}

// Master returns the master set's name.
func (r *Resolver) Master() string { return r.opts.Master }

// Primary returns the last confirmed primary's address ("" before the
// first). It is what the sentinels and ROLE said at the last successful
// attempt; after a failed connection to it, ask again (ReportFailure,
// Resolve).
func (r *Resolver) Primary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primary
}

// Watch returns the last confirmed primary and a channel closed when it
// changes (then call Watch again for the new one and the next change).
func (r *Resolver) Watch() (string, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primary, r.changed
}

// Resolve asks again now and returns the primary confirmed by the first
// attempt that starts after the call, waiting for it until ctx is done;
// then the error wraps ErrNoPrimary and the last attempt's reasons. The
// attempts go on in the background until one succeeds, whoever waits.
func (r *Resolver) Resolve(ctx context.Context) (string, error) {
	r.mu.Lock()
	need := r.started + 1
	r.mu.Unlock()
	r.Kick()
	for {
		r.mu.Lock()
		if r.confirmed >= need {
			p := r.primary
			r.mu.Unlock()
			return p, nil
		}
		tick := r.tick
		r.mu.Unlock()
		select {
		case <-tick:
		case <-r.ctx.Done():
			return "", fmt.Errorf("%w: master %s", ErrClosed, r.opts.Master)
		case <-ctx.Done():
			r.mu.Lock()
			last := r.lastErr
			r.mu.Unlock()
			if last == nil {
				return "", fmt.Errorf("%w: master %s: %w", ErrNoPrimary, r.opts.Master, ctx.Err())
			}
			return "", fmt.Errorf("%w: master %s: %w; last attempt: %w", ErrNoPrimary, r.opts.Master, ctx.Err(), last)
		}
	}
}

// ReportFailure tells the resolver that a connection to addr failed (or
// that addr answered as no primary would, -READONLY say): when addr is the
// current primary, an attempt is made at once. It never blocks.
func (r *Resolver) ReportFailure(addr string) {
	if p := r.Primary(); p == "" || p == addr {
		r.Kick()
	}
}

// Kick asks for an attempt without waiting for it. It never blocks.
func (r *Resolver) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Failovers returns how many times the confirmed primary changed from one
// address to another.
func (r *Resolver) Failovers() uint64 { return r.failovers.Load() }

// Refusals returns how many candidates named by the sentinels (or by a
// +switch-master message) answered ROLE with another role than master.
func (r *Resolver) Refusals() uint64 { return r.refusals.Load() }

// Subscribed returns how many sentinels the +switch-master subscription
// is currently confirmed on.
func (r *Resolver) Subscribed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ok := range r.subscribed {
		if ok {
			n++
		}
	}
	return n
}

// Close stops the goroutines and closes every connection; a Resolve
// waiting returns ErrClosed.
func (r *Resolver) Close() {
	r.cancel()
	r.wg.Wait()
	for _, c := range r.clients {
		c.Close()
	}
	if r.roleClient != nil {
		r.roleClient.Close()
	}
}

// loop makes the attempts: a round when kicked or at every refresh, and
// within a round one attempt after another, with a backoff, until one
// confirms a primary.
func (r *Resolver) loop() {
	defer r.wg.Done()
	var refresh <-chan time.Time
	if r.opts.Refresh > 0 {
		t := time.NewTicker(r.opts.Refresh)
		defer t.Stop()
		refresh = t.C
	}
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.kick:
		case <-refresh:
		}
		r.round()
	}
}

// round attempts until a primary is confirmed or the resolver is closed.
func (r *Resolver) round() {
	wait := retryMin
	for failures := 0; ; failures++ {
		r.mu.Lock()
		r.started++
		n := r.started
		r.mu.Unlock()
		addr, err := r.attempt()
		if r.ctx.Err() != nil {
			return
		}
		r.finish(n, addr, err, failures)
		if err == nil {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-r.kick:
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, retryMax)
	}
}

// finish records attempt n's outcome and wakes the callers waiting.
func (r *Resolver) finish(n uint64, addr string, err error, failures int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.lastErr = err
		if failures == 0 {
			r.log.Warn("no primary confirmed; asking again", zap.Error(err))
		} else {
			r.log.Debug("no primary confirmed; asking again", zap.Int("attempt", failures+1), zap.Error(err))
		}
	} else {
		r.confirmed, r.lastErr = n, nil
		if addr != r.primary {
			old := r.primary
			r.primary = addr
			close(r.changed)
			r.changed = make(chan struct{})
			if old == "" {
				r.log.Info("primary found", zap.String("primary", addr))
			} else {
				r.failovers.Add(1)
				r.log.Warn("primary switched", zap.String("from", old), zap.String("to", addr))
			}
		} else if failures > 0 {
			r.log.Info("primary confirmed", zap.String("primary", addr), zap.Int("attempts", failures+1))
		}
	}
	close(r.tick)
	r.tick = make(chan struct{})
}
