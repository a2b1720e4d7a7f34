package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/session"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// errTooManyFiles is the accept error worth retrying after a pause.
var errTooManyFiles = syscall.EMFILE

// replyMaxClients is redis's answer to a connection over maxclients.
var replyMaxClients = clienterr.Reply(clienterr.New(clienterr.Err, "max number of clients reached"))

// Server is the proxy: it accepts clients, serves each in its own session,
// and forwards to its upstreams by route.
type Server struct {
	opts     Options
	log      *zap.Logger
	audit    *zap.Logger
	met      *observe.Metrics
	up       *upstream.Upstream            // the first upstream (the single-upstream shorthand's)
	ups      []*upstream.Upstream          // every upstream, in Options order
	byName   map[string]*upstream.Upstream // by name
	routes   atomic.Pointer[plan.Router]
	keys     cmdtable.Store // the upstreams' command tables: key positions, arities, flags
	policy   atomic.Pointer[rewrite.Policy]
	cap      observe.Capture  // the running capture, if any (observe.go)
	mem      *limits.Budget   // the process-wide memory budget (budget.go)
	memLimit *memLimit        // the runtime's soft memory limit; nil: not kept (memlimit.go)
	fails    limits.AuthTable // failed authentications by source address (authlimit.go)
	ctl      *controller      // the control table's loop; nil when off (control.go)
	// ctlHook is ctl for the upstreams' connection hook (caughtUpHook),
	// which may run before ctl is set.
	ctlHook atomic.Pointer[controller]
	redir   pubsub.Redirects // RESP2 tracking's relays and their targets (package tracking)

	metLatency bool
	acking     bool // some upstream waits for replicas (upstream/ack.go)

	ctx    context.Context // canceled when the server closes
	cancel context.CancelFunc

	closing atomic.Bool
	clients atomic.Int64
	nextID  atomic.Uint64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sh        session.Shared // what the sessions share (shared, at the end of New)
	wg        sync.WaitGroup
}

// New applies the defaults, validates opts (Options says by which rules)
// and starts connecting to the
// upstream in the background. logger is the operational log, audit the
// audit log (its own sink; nil disables auditing). Audit records are
// written on the audit logger's core directly, after one level check per
// batch (package observe): its core must write in Write, as zapcore.NewCore's
// does (a tee writes to each core it holds, whatever its level; a sampling
// core samples nothing; hooks do not run).
func New(opts Options, logger, audit *zap.Logger) (*Server, error) {
	opts = opts.withDefaults()
	seen := map[string]bool{}
	for _, u := range opts.Upstreams {
		switch {
		case u.Address == "" && u.Sentinel == nil:
			return nil, fmt.Errorf("%w: upstream %q: no address", ErrOptions, u.Name)
		case u.Address != "" && u.Sentinel != nil:
			return nil, fmt.Errorf("%w: upstream %q: an address and a sentinel master set; set one", ErrOptions, u.Name)
		}
		// The configuration's rule: WAIT sends nothing back until it
		// ends, so the reply timeout would break the connection first.
		if err := config.CheckAck("upstreams."+u.Name, u.AckReplicas, u.AckTimeout, "its reply timeout", u.Timeout); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
		if seen[u.Name] {
			return nil, fmt.Errorf("%w: upstream name %q used twice", ErrOptions, u.Name)
		}
		seen[u.Name] = true
	}
	if opts.Policy == nil {
		return nil, fmt.Errorf("%w: no policy", ErrOptions)
	}
	if opts.MaxBulk > 1<<62 {
		return nil, fmt.Errorf("%w: max bulk %d too large", ErrOptions, opts.MaxBulk)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	met, err := session.NewMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrOptions, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:       opts,
		log:        logger.Named("proxy"),
		audit:      audit,
		met:        met,
		metLatency: true,
		ctx:        ctx,
		cancel:     cancel,
		listeners:  map[net.Listener]struct{}{},
		mem:        limits.NewBudget(opts.MaxBuffered),
		memLimit:   newMemLimit(opts.SoftMemoryLimit, opts.MaxBuffered),
	}
	s.redir.Max = int(min(opts.MaxReplyBytes, int64(^uint(0)>>1)))
	s.redir.Transport = opts.Transport
	if err := s.registerBudgetMetrics(opts.Registry); err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrOptions, err)
	}
	s.SwapPolicy(opts.Policy)
	s.byName = make(map[string]*upstream.Upstream, len(opts.Upstreams))
	var ctlOpts ControlOptions
	if opts.Control != nil {
		ctlOpts = *opts.Control
		if ctlOpts.ID == "" {
			ctlOpts.ID = defaultControlID()
		}
	}
	for _, uo := range opts.Upstreams {
		hook := uo.OnConnect
		if opts.Control != nil {
			// The data connections carry the proxy's id, and one that reads
			// a node epoch the proxy has not applied lapses the lease on the
			// node until it has (control.go's caughtUp; package control's
			// latewriters.go).
			uo.ClientName = table.DataClientName(ctlOpts.ID)
			hook = s.caughtUpHook(uo.WithDefaults().Name, hook)
		}
		// Every upstream loads its command table, even alone: key
		// positions choose between upstreams, and inside MULTI the names,
		// arities and flags give a command the server's own queue-time
		// error (package plan's queuecheck.go).
		u, err := upstream.New(uo, hook, &s.keys, &s.clients, s.log, met)
		if err != nil {
			s.closeUpstreams()
			return nil, err
		}
		s.ups = append(s.ups, u)
		s.acking = s.acking || u.Acks()
		s.byName[u.Name()] = u
	}
	s.up = s.ups[0]
	rs := opts.Routes
	if len(rs) == 0 {
		rs = defaultRoutes(s.up)
	}
	r, err := s.compileRoutes(rs)
	if err != nil {
		s.closeUpstreams()
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	s.routes.Store(r)
	if err := s.cap.RegisterMetrics(opts.Registry); err != nil {
		s.closeUpstreams()
		return nil, fmt.Errorf("%w: metrics: %w", ErrOptions, err)
	}
	if c := opts.Capture; c != nil && len(c.Queues) > 0 {
		if err := s.StartCapture(*c); err != nil {
			s.closeUpstreams()
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
	}
	if opts.Control != nil {
		if s.ctl, err = newController(s, ctlOpts); err != nil {
			s.closeUpstreams()
			return nil, err
		}
		s.ctlHook.Store(s.ctl)
		s.ctl.run()
	}
	s.shared()
	return s, nil
}

// shared fills what the sessions share from the server's values.
func (s *Server) shared() {
	o := &s.opts
	s.sh = session.Shared{
		Cfg: session.Config{MaxMultibulk: o.MaxMultibulk, MaxBulk: o.MaxBulk, MaxInline: o.MaxInline,
			MaxQueryBuffer: o.MaxQueryBuffer, MaxPipeline: o.MaxPipeline, MaxReplyBytes: o.MaxReplyBytes,
			ShareCommands: o.ShareCommands, ShareBytes: o.ShareBytes, IsolateFor: o.IsolateFor,
			MaxQueuedMulti: o.MaxQueuedMulti, IdleTimeout: o.IdleTimeout, WriteTimeout: o.WriteTimeout,
			AuthFailDelay: o.AuthFailDelay, MaxAuthFailDelay: o.MaxAuthFailDelay, MaxAuthFailures: o.MaxAuthFailures,
			AuthTimeout: o.AuthTimeout, AuditPassthrough: o.AuditPassthrough},
		Log: s.log, Audit: s.audit, Met: s.met, MetLatency: s.metLatency,
		Mem: s.mem, Fails: &s.fails, Keys: &s.keys, Cap: &s.cap, Redir: &s.redir,
		Ups: s.ups, Routes: &s.routes, Policy: &s.policy, Acking: s.acking,
		Ctx: s.ctx, Closing: &s.closing, Hooks: o.Hooks, Transport: o.Transport,
	}
	if s.ctl != nil {
		s.sh.Ctl = s.ctl
	}
}

// closeUpstreams stops every upstream.
func (s *Server) closeUpstreams() {
	for _, u := range s.ups {
		u.Close()
	}
}

// SwapPolicy replaces the decision policy (for example after a map
// reload). Batches already being decided finish on the old one.
func (s *Server) SwapPolicy(p *rewrite.Policy) {
	if p == nil {
		return
	}
	old := s.policy.Swap(p)
	if old != nil && old.Map != nil {
		s.met.MapInfo.DeleteLabelValues(old.Map.Digest)
	}
	if p.Map != nil {
		s.met.MapInfo.WithLabelValues(p.Map.Digest).Set(1)
	}
}

// Policy returns the policy in use.
func (s *Server) Policy() *rewrite.Policy { return s.policy.Load() }

// Upstream returns the first upstream (the only one with the
// single-upstream shorthand), for its state (Up, Fenced, LastError).
func (s *Server) Upstream() *upstream.Upstream { return s.up }

// Upstreams returns every upstream, in Options order.
func (s *Server) Upstreams() []*upstream.Upstream { return append([]*upstream.Upstream(nil), s.ups...) }

// UpstreamNamed returns the upstream of that name, or nil.
func (s *Server) UpstreamNamed(name string) *upstream.Upstream { return s.byName[name] }

// Ready reports whether the proxy serves: not shutting down, and every
// upstream connected with its fence holding.
func (s *Server) Ready() bool { return s.Readiness() == nil }

// Readiness returns nil when the proxy is ready, else the reason it is not
// (the first upstream, in Options order, that is not fenced).
func (s *Server) Readiness() error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	for _, u := range s.ups {
		if err := u.Readiness(); err != nil {
			return fmt.Errorf("upstream %s: %w", u.Name(), err)
		}
	}
	return nil
}

// ListenAndServe listens on each address of Options.Listen and serves
// them all (ServeAll).
func (s *Server) ListenAndServe() error {
	lns, err := Listen(s.opts.Listen, s.opts.SocketMode)
	if err != nil {
		return err
	}
	return s.ServeAll(lns)
}

// Listen opens a listener on each of the comma-separated addresses
// (host:port, or unix:/path/to.sock whose file gets mode: package
// netaddr), or none and the first error.
func Listen(addrs string, mode fs.FileMode) ([]net.Listener, error) {
	var lns []net.Listener
	for a := range strings.SplitSeq(addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ln, err := netaddr.Listen(a, mode)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, fmt.Errorf("proxy: listen %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	if len(lns) == 0 {
		return nil, fmt.Errorf("proxy: listen %q: no address", addrs)
	}
	return lns, nil
}

// ServeAll serves every listener of lns (Serve) until Shutdown, or until
// one of them fails: the others are then closed (a Unix socket's file
// removed), and the first error is returned once all have stopped.
func (s *Server) ServeAll(lns []net.Listener) error {
	if len(lns) == 1 {
		return s.Serve(lns[0])
	}
	errs := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { errs <- s.Serve(ln) }()
	}
	first := <-errs
	if !errors.Is(first, ErrServerClosed) {
		for _, ln := range lns {
			_ = ln.Close() // a second Close of a listener is harmless
		}
	}
	for range len(lns) - 1 {
		<-errs
	}
	return first
}

// Serve accepts clients on ln until Shutdown (then it returns
// ErrServerClosed) or an accept error. With Options.TLSConfig set, ln is
// wrapped to speak TLS.
func (s *Server) Serve(ln net.Listener) error {
	if s.opts.TLSConfig != nil {
		ln = tls.NewListener(ln, s.opts.TLSConfig)
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	s.log.Info("serving", zap.String("listen", ln.Addr().String()), zap.Strings("upstreams", s.upstreamNames()),
		zap.String("routes", FormatRoutes(s.routes.Load().Spec())))
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay) // backoff on a transient accept error, as net/http does
				continue
			}
			return fmt.Errorf("proxy: accept: %w", err)
		}
		delay = 0
		s.accept(nc)
	}
}

// accept starts a session for nc, or turns it away over MaxClients.
func (s *Server) accept(nc net.Conn) {
	n := s.clients.Add(1)
	if n > int64(s.opts.MaxClients) {
		s.clients.Add(-1)
		s.met.Rejected.WithLabelValues("max_clients").Inc()
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write(replyMaxClients)
		_ = nc.Close()
		return
	}
	sess := session.New(&s.sh, s.nextID.Add(1), nc)
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		s.clients.Add(-1)
		_ = nc.Close()
		return
	}
	s.sh.Sessions.Add(sess)
	s.wg.Add(1)
	s.mu.Unlock()
	s.met.Accepted.Inc()
	s.met.Clients.Inc()
	s.memLimit.track(n) // memlimit.go
	go func() {
		defer s.wg.Done()
		defer func() {
			s.sh.Sessions.Remove(sess)
			s.sh.Redir.Forget(sess.ID()) // after Remove: see pubsub.Redirects.End
			s.memLimit.track(s.clients.Add(-1))
			s.met.Clients.Dec()
		}()
		sess.Serve()
	}()
}

// Shutdown stops accepting, lets every session finish the batch it is
// serving (up to ctx's deadline), then closes every client and upstream
// connection.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	s.mem.Close() // sessions waiting for room to read end
	for ln := range s.listeners {
		_ = ln.Close()
	}
	s.sh.Sessions.Each((*session.Session).Wake) // sessions waiting for input
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.sh.Sessions.Each((*session.Session).Close)
	}
	s.cancel()
	if s.ctl != nil {
		s.ctl.stop()
	}
	s.closeUpstreams()
	<-done
	_, _, _ = s.StopCapture() // writes what is queued; the log has the outcome
	return err
}

// Close shuts down without waiting for in-flight batches.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = s.Shutdown(ctx)
	return nil
}

// caughtUpHook runs next (the upstream's fence hook, if any), then the
// control loop's caughtUp on every new connection to the upstream named
// name. A connection opened before the loop exists passes: no queue's
// command is sent before the loop's first round read every table after it.
func (s *Server) caughtUpHook(name string, next upstream.OnConnectFunc) upstream.OnConnectFunc {
	return func(ctx context.Context, c fence.Conn) error {
		if next != nil {
			if err := next(ctx, c); err != nil {
				return err
			}
		}
		if ctl := s.ctlHook.Load(); ctl != nil {
			return ctl.caughtUp(ctx, name, c)
		}
		return nil
	}
}
