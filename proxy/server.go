package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/rewrite"
)

// errTooManyFiles is the accept error worth retrying after a pause.
var errTooManyFiles = syscall.EMFILE

// replyMaxClients is redis's answer to a connection over maxclients.
var replyMaxClients = []byte("-ERR max number of clients reached\r\n")

// Server is the proxy: it accepts clients, serves each in its own session,
// and forwards to its upstream.
type Server struct {
	opts   Options
	log    *zap.Logger
	audit  *zap.Logger
	met    *metrics
	up     *Upstream
	policy atomic.Pointer[rewrite.Policy]

	metLatency bool

	ctx    context.Context // canceled when the server closes
	cancel context.CancelFunc

	closing atomic.Bool
	clients atomic.Int64
	nextID  atomic.Uint64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	sessions  map[*session]struct{}
	wg        sync.WaitGroup
}

// New validates opts, applies the defaults and starts connecting to the
// upstream in the background. logger is the operational log, audit the
// audit log (its own sink; nil disables auditing).
func New(opts Options, logger, audit *zap.Logger) (*Server, error) {
	opts = opts.withDefaults()
	if opts.Upstream.Address == "" {
		return nil, fmt.Errorf("%w: no upstream address", ErrOptions)
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
	met, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %v", ErrOptions, err)
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
		sessions:   map[*session]struct{}{},
	}
	s.SwapPolicy(opts.Policy)
	s.up = newUpstream(opts.Upstream, opts.OnConnect, s.log, met)
	return s, nil
}

// SwapPolicy replaces the decision policy (for example after a map
// reload). Batches already being decided finish on the old one.
func (s *Server) SwapPolicy(p *rewrite.Policy) {
	if p == nil {
		return
	}
	old := s.policy.Swap(p)
	if old != nil && old.Map != nil {
		s.met.mapInfo.DeleteLabelValues(old.Map.Digest)
	}
	if p.Map != nil {
		s.met.mapInfo.WithLabelValues(p.Map.Digest).Set(1)
	}
}

// Policy returns the policy in use.
func (s *Server) Policy() *rewrite.Policy { return s.policy.Load() }

// Upstream returns the upstream, for its state (Up, Fenced, LastError).
func (s *Server) Upstream() *Upstream { return s.up }

// Ready reports whether the proxy serves: not shutting down, and the
// upstream connected with its fence holding.
func (s *Server) Ready() bool { return s.Readiness() == nil }

// Readiness returns nil when the proxy is ready, else the reason it is not.
func (s *Server) Readiness() error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	if !s.up.Fenced() {
		if err := s.up.LastError(); err != nil {
			return fmt.Errorf("upstream %s: %w", s.up.name, err)
		}
		return fmt.Errorf("upstream %s: %w: not fenced", s.up.name, ErrUnavailable)
	}
	return nil
}

// ListenAndServe listens on Options.Listen and serves.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("proxy: listen %s: %w", s.opts.Listen, err)
	}
	return s.Serve(ln)
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
	s.log.Info("serving", zap.String("listen", ln.Addr().String()), zap.String("upstream", s.opts.Upstream.Address))
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
	if s.clients.Add(1) > int64(s.opts.MaxClients) {
		s.clients.Add(-1)
		s.met.rejected.WithLabelValues("max_clients").Inc()
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write(replyMaxClients)
		_ = nc.Close()
		return
	}
	sess := newSession(s, s.nextID.Add(1), nc)
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		s.clients.Add(-1)
		_ = nc.Close()
		return
	}
	s.sessions[sess] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.met.accepted.Inc()
	s.met.clients.Inc()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.sessions, sess)
			s.mu.Unlock()
			s.clients.Add(-1)
			s.met.clients.Dec()
		}()
		sess.serve()
	}()
}

// Shutdown stops accepting, lets every session finish the batch it is
// serving (up to ctx's deadline), then closes every client and upstream
// connection.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		_ = ln.Close()
	}
	for sess := range s.sessions {
		_ = sess.nc.SetReadDeadline(time.Now()) // wake sessions waiting for input
	}
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
		s.mu.Lock()
		for sess := range s.sessions {
			_ = sess.nc.Close()
		}
		s.mu.Unlock()
	}
	s.cancel()
	s.up.close()
	<-done
	return err
}

// Close shuts down without waiting for in-flight batches.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = s.Shutdown(ctx)
	return nil
}
