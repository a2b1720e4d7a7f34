package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/admin"
	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/discovery"
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

func newServeCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve legacy clients in front of module and scripts nodes, routed by queue",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(path, cmd.Flags())
			if err != nil {
				return err
			}
			return serve(cmd.Context(), path, cmd.Flags(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "configuration file (YAML); every key can also be set by EMQPROXY_<KEY>")
	// Flags named after configuration keys override the file and the environment.
	f.String("listen", "", "client listener address (listen)")
	f.String("map", "", "pinned map file (map)")
	f.String("admin.listen", "", "admin listener address (admin.listen)")
	f.String("log.level", "", "log level (log.level)")
	f.String("audit.sink", "", "audit sink: stderr, stdout or a file (audit.sink)")
	return cmd
}

// daemon is a running proxy with what reload and shutdown need.
type daemon struct {
	path  string
	flags *pflag.FlagSet // serve's, read again by a reload
	cfg   *config.Config // as started; the keys a reload cannot change are read here
	log   *zap.Logger
	level zap.AtomicLevel // log.level, set by a reload
	audit *zap.Logger
	srv   *proxy.Server
	admin *admin.Server
	// fenceMap is the map the fence hooks check against. The hooks run
	// from proxy.New on (its upstreams connect at once), before d.srv is
	// set, so they must not reach the map through d.srv.
	fenceMap atomic.Pointer[shamap.Map]

	reloading sync.Mutex     // one reload at a time (SIGHUP, POST /reload)
	running   *config.Config // the configuration last applied; under reloading
	reloads   *reloadMetrics
}

// serve is `emqproxy serve`: it sets up the logs, loads the map, starts the
// proxy and the admin listener, and runs until a signal or ctx ends it.
func serve(ctx context.Context, path string, flags *pflag.FlagSet, cfg *config.Config) error {
	log, level, err := newLogger(cfg.Log)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	auditErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "emqproxy_audit_write_errors_total",
		Help: "Writes of audit records the audit sink refused (their records are lost).",
	})
	audit, closeAudit, err := newAuditLogger(cfg.Audit, auditErrors)
	if err != nil {
		return err
	}
	defer closeAudit()
	if cfg.Runtime.GOMAXPROCS > 0 {
		runtime.GOMAXPROCS(cfg.Runtime.GOMAXPROCS)
	}

	m, err := shamap.Load(cfg.Map)
	if err != nil {
		return err
	}
	d := &daemon{path: path, flags: flags, cfg: cfg, running: cfg, log: log, level: level, audit: audit}
	d.fenceMap.Store(m)
	reg := prometheus.NewRegistry()
	reg.MustRegister(auditErrors, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if d.reloads, err = newReloadMetrics(reg); err != nil {
		return err
	}

	opts, err := d.proxyOptions(m, reg)
	if err != nil {
		return err
	}
	d.srv, err = proxy.New(opts, log, audit)
	if err != nil {
		return err
	}
	log.Info("map loaded", zap.String("map", cfg.Map), zap.String("digest", m.Digest),
		zap.Int("scripts", len(m.Scripts)), zap.String("legacy_brand", m.LegacyBrand), zap.String("source", m.Source))
	audit.Info("map", zap.String("map", m.Digest), zap.String("path", cfg.Map), zap.String("source", m.Source))

	adminToken, err := cfg.AdminToken()
	if err != nil {
		return err
	}
	lns, err := proxy.Listen(cfg.Listen, cfg.SocketMode())
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	closeListeners := func() {
		for _, ln := range lns {
			_ = ln.Close() // a Unix socket's file is removed
		}
	}
	if cfg.Admin.Listen != "" {
		d.admin, err = admin.Listen(cfg.Admin.Listen, admin.Options{
			Registry:  reg,
			Ready:     d.srv.Readiness,
			Upstreams: d.upstreamStates,
			Reload:    d.reload,
			Capture:   d.captureControl,
			Pprof:     cfg.Admin.Pprof,
			Token:     adminToken,
		})
		if err != nil {
			closeListeners()
			return fmt.Errorf("admin.listen: %w", err)
		}
		log.Info("admin listening", zap.String("addr", d.admin.Addr()), zap.Bool("token", adminToken != ""),
			zap.Bool("loopback_only", d.admin.LoopbackOnly()))
		if adminToken == "" && !d.admin.LoopbackOnly() {
			log.Warn("admin: POST /reload, POST /capture and pprof are refused (403): the admin listener is not loopback-only and no admin.token is set",
				zap.String("addr", d.admin.Addr()))
		}
	}

	served := make(chan error, 1)
	go func() { served <- d.srv.ServeAll(lns) }()
	log.Info("started", zap.String("version", version), zap.Strings("upstreams", cfg.UpstreamNames()),
		zap.Int("gomaxprocs", runtime.GOMAXPROCS(0)))
	return d.run(ctx, served)
}

// run waits for the end: the proxy stops serving (served), ctx is done,
// or SIGINT/SIGTERM drains it; SIGHUP reloads the configuration and the map.
func (d *daemon) run(ctx context.Context, served <-chan error) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for {
		select {
		case err := <-served:
			d.shutdownAdmin()
			return err
		case <-ctx.Done():
			return d.shutdown(served)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				_ = d.reload() // a refusal is logged, audited and counted there
				continue
			}
			d.log.Info("draining", zap.String("signal", sig.String()), zap.Duration("deadline", d.cfg.Timeouts.Drain))
			return d.shutdown(served)
		}
	}
}

// shutdown stops accepting, lets in-flight batches finish up to the drain
// deadline, then closes every connection.
func (d *daemon) shutdown(served <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeouts.Drain)
	defer cancel()
	err := d.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		d.log.Warn("drain deadline passed; remaining clients closed")
		err = nil
	}
	<-served
	d.shutdownAdmin()
	d.log.Info("stopped")
	return err
}

// shutdownAdmin stops the admin listener, if there is one.
func (d *daemon) shutdownAdmin() {
	if d.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = d.admin.Shutdown(ctx)
}

// proxyOptions turns the configuration into the proxy's options: every
// upstream with its role and its fence, and the routes.
func (d *daemon) proxyOptions(m *shamap.Map, reg prometheus.Registerer) (proxy.Options, error) {
	cfg := d.cfg
	ltls, err := listenerTLS(cfg.TLS)
	if err != nil {
		return proxy.Options{}, err
	}
	ups, err := d.upstreamOptions()
	if err != nil {
		return proxy.Options{}, err
	}
	db := cfg.Upstreams[cfg.Routes[len(cfg.Routes)-1].Upstream].DB
	return proxy.Options{
		Listen:           cfg.Listen,
		SocketMode:       cfg.SocketMode(),
		TLSConfig:        ltls,
		Upstreams:        ups,
		Routes:           routesOf(cfg),
		Control:          controlOptions(cfg),
		Policy:           policyFor(cfg, m, db),
		MaxClients:       cfg.Limits.MaxClients,
		MaxMultibulk:     cfg.Limits.MaxMultibulk,
		MaxBulk:          cfg.Limits.MaxBulk,
		MaxInline:        cfg.Limits.MaxInline,
		MaxPipeline:      cfg.Limits.MaxPipeline,
		MaxReplyBytes:    cfg.Limits.MaxReplyBytes,
		MaxQueuedMulti:   cfg.Limits.MaxQueuedMulti,
		MaxBuffered:      cfg.Limits.BufferedBytes,
		SoftMemoryLimit:  cfg.Runtime.SoftMemoryLimit && os.Getenv("GOMEMLIMIT") == "",
		ShareCommands:    cfg.Limits.ShareCommands,
		ShareBytes:       cfg.Limits.ShareBytes,
		IsolateFor:       cfg.Limits.IsolateFor,
		WriteTimeout:     cfg.Timeouts.Write,
		IdleTimeout:      cfg.Timeouts.Idle,
		AuthFailDelay:    cfg.Auth.FailDelay,
		MaxAuthFailures:  cfg.Auth.MaxFailures,
		MaxAuthFailDelay: cfg.Auth.MaxFailDelay,
		AuthTimeout:      cfg.Auth.Timeout,
		AuditPassthrough: cfg.Audit.Passthrough,
		Capture:          captureOptions(cfg, cfg.Capture.Queues),
		Registry:         reg,
	}, nil
}

// captureOptions is the capture section with queues (nil when none).
func captureOptions(cfg *config.Config, queues []string) *proxy.CaptureOptions {
	if len(queues) == 0 {
		return nil
	}
	return &proxy.CaptureOptions{Queues: queues, Dir: cfg.Capture.Dir, MaxBytes: cfg.Capture.MaxBytes, Redact: cfg.Capture.Redact}
}

// captureControl is POST /capture (start, stop) and GET /capture (status):
// start uses the capture section, with the request's queues when given.
// upstreamStates is every upstream's line of /readyz.
func (d *daemon) upstreamStates() []admin.UpstreamState {
	ups := d.srv.Upstreams()
	out := make([]admin.UpstreamState, len(ups))
	for i, u := range ups {
		out[i] = admin.UpstreamState{Name: u.Name(), Err: u.Readiness()}
	}
	return out
}

func (d *daemon) captureControl(req admin.CaptureRequest) ([]byte, error) {
	type status struct {
		Running bool `json:"running"`
		capture.Stats
	}
	var st status
	var err error
	switch req.Action {
	case "start":
		queues := req.Queues
		if len(queues) == 0 {
			queues = d.cfg.Capture.Queues
		}
		o := captureOptions(d.cfg, queues)
		if o == nil {
			return nil, errors.New("no queues: set capture.queues or pass queues=")
		}
		if o.Dir == "" {
			return nil, errors.New("capture.dir is not configured")
		}
		if err = d.srv.StartCapture(*o); err != nil {
			return nil, err
		}
		st.Stats, st.Running = d.srv.CaptureStats()
	case "stop":
		st.Stats, _, err = d.srv.StopCapture()
	default:
		st.Stats, st.Running = d.srv.CaptureStats()
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(st)
}

// upstreamOptions returns every configured upstream, by name, with the
// fence of its role: the wire-6 check on a module node, the wire-4 check
// against the map's legacy brand on a scripts node.
func (d *daemon) upstreamOptions() ([]proxy.UpstreamOptions, error) {
	cfg := d.cfg
	var out []proxy.UpstreamOptions
	dbs := map[int]bool{}
	for _, name := range cfg.UpstreamNames() {
		u := cfg.Upstreams[name]
		utls, err := upstreamTLS(name, u.TLS)
		if err != nil {
			return nil, err
		}
		so, err := sentinelOptions(name, u, cfg.Timeouts.Dial)
		if err != nil {
			return nil, err
		}
		o := proxy.UpstreamOptions{
			Name:        name,
			Address:     u.Address,
			Username:    u.Username,
			Password:    u.Password,
			DB:          u.DB,
			TLSConfig:   utls,
			Conns:       u.Conns,
			DialTimeout: cfg.Timeouts.Dial,
			Timeout:     cfg.Timeouts.Upstream,
			OnConnect:   d.moduleFence(u),
			Sentinel:    so,
			// failover_wait: 0 gives the error at once, which the proxy's
			// options say the same way.
			FailoverWait: u.FailoverWait,
			AckReplicas:  u.AckReplicas,
			AckTimeout:   u.AckTimeout,
			// timeouts.probe: 0 disables the probe, which the proxy's
			// options say with a negative interval.
			ProbeInterval: cmp.Or(cfg.Timeouts.Probe, -1),
		}
		if u.Role == config.RoleScripts {
			o.Role, o.OnConnect = proxy.RoleScripts, d.scriptsFence(u)
		}
		dbs[u.DB] = true
		out = append(out, o)
	}
	if len(dbs) > 1 {
		// SELECT is answered by the proxy for one database only.
		return nil, fmt.Errorf("upstreams: every upstream must use the same db (SELECT is answered by the proxy)")
	}
	return out, nil
}

// sentinelOptions is an upstream's sentinel section as discovery's
// options (nil for a fixed address). The data nodes are reached with the
// upstream's own credentials and TLS (the proxy sets them); dial bounds a
// dial to a sentinel or a candidate.
func sentinelOptions(name string, u config.Upstream, dial time.Duration) (*discovery.Options, error) {
	if u.Sentinel.IsZero() {
		return nil, nil
	}
	stls, err := upstreamTLS(name+".sentinel", u.Sentinel.TLS)
	if err != nil {
		return nil, err
	}
	return &discovery.Options{
		Master:      u.Sentinel.Master,
		Addresses:   u.Sentinel.Addresses,
		Username:    u.Sentinel.Username,
		Password:    u.Sentinel.Password,
		TLSConfig:   stls,
		DialTimeout: dial,
		Timeout:     dial,
	}, nil
}

// controlOptions turns on the control table (control.enabled).
func controlOptions(cfg *config.Config) *proxy.ControlOptions {
	if !cfg.Control.Enabled {
		return nil
	}
	return &proxy.ControlOptions{Poll: cfg.Control.Poll, Lease: cfg.Control.Lease, Hold: cfg.Timeouts.Hold}
}

// fileRoute is the configured route of a queue, by the proxy's own rule
// (proxy.QueueRoute): the mover's and the leftovers' FileRoute.
func fileRoute(cfg *config.Config) func(queue string) string {
	rs := routesOf(cfg)
	return func(queue string) string { return proxy.QueueRoute(rs, queue) }
}

// routesOf returns the configured routes in the proxy's terms.
func routesOf(cfg *config.Config) []proxy.Route {
	rs := make([]proxy.Route, len(cfg.Routes))
	for i, r := range cfg.Routes {
		rs[i] = proxy.Route{Queues: r.Queues, Upstream: r.Upstream}
	}
	return rs
}

// moduleFence is the wire-6 fence run on every connection to a module
// upstream, with the map in use at the time of the connect.
func (d *daemon) moduleFence(u config.Upstream) proxy.OnConnectFunc {
	return d.fenceHook(u, func(ctx context.Context, c fence.Conn) (fence.Result, error) {
		return fence.CheckModule(ctx, c, d.fenceMap.Load(), u.Install)
	})
}

// scriptsFence is the wire-4 fence run on every connection to a scripts
// upstream: {emq}:version must be the map's legacy brand; an absent key is
// claimed with SET ... NX only when the upstream says install.
func (d *daemon) scriptsFence(u config.Upstream) proxy.OnConnectFunc {
	return d.fenceHook(u, func(ctx context.Context, c fence.Conn) (fence.Result, error) {
		return fence.CheckScripts(ctx, c, d.fenceMap.Load().LegacyBrand, u.Install)
	})
}

// fenceHook runs check on a new connection (or a probe's) and records the
// fence events: the operational log gets every failure, the audit log gets
// every change of outcome (pass after a failure, a failure after a pass or
// with another error) and every brand the proxy wrote. A pass that changes
// nothing is not recorded: the probe re-runs the fence every second.
func (d *daemon) fenceHook(u config.Upstream, check func(context.Context, fence.Conn) (fence.Result, error)) proxy.OnConnectFunc {
	var mu sync.Mutex
	last := "unknown"
	return func(ctx context.Context, c fence.Conn) error {
		res, err := check(ctx, c)
		outcome := "pass"
		if err != nil {
			outcome = err.Error()
			d.log.Error("upstream fence failed", zap.String("upstream", u.Name), zap.String("role", u.Role), zap.Error(err))
		}
		mu.Lock()
		changed := outcome != last
		last = outcome
		mu.Unlock()
		if changed || res.Installed {
			fields := []zap.Field{zap.String("upstream", u.Name), zap.String("role", u.Role),
				zap.String("node", res.Kind.String()), zap.Bool("installed", res.Installed), zap.String("map", d.fenceMap.Load().Digest)}
			if err != nil {
				fields = append(fields, zap.String("error", err.Error()))
			}
			d.audit.Info("fence", fields...)
		}
		if res.Installed {
			d.log.Info("upstream branded", zap.String("upstream", u.Name), zap.String("role", u.Role))
		}
		return err
	}
}

// policyFor builds the decision policy from the configuration and a map.
func policyFor(cfg *config.Config, m *shamap.Map, db int) *rewrite.Policy {
	p := &rewrite.Policy{Map: m, DB: db}
	if cfg.Policy.UnknownScripts == config.UnknownReadonly {
		p.Unknown = rewrite.ReadonlyUnknown
	}
	// An empty policy.deny (deny: [] in the production example) keeps the
	// built-in list, as the example says; only a list with entries
	// replaces it.
	if len(cfg.Policy.Deny) > 0 {
		p.Deny = make(map[string]bool, len(cfg.Policy.Deny))
		for _, c := range cfg.Policy.Deny {
			p.Deny[strings.ToUpper(strings.Join(strings.Fields(c), " "))] = true
		}
	}
	if len(cfg.Policy.Allow) > 0 {
		p.Allow = make(map[string]bool, len(cfg.Policy.Allow))
		for _, c := range cfg.Policy.Allow {
			p.Allow[strings.ToUpper(strings.Join(strings.Fields(c), " "))] = true
		}
	}
	if cfg.Auth.Password != "" || len(cfg.Auth.Users) > 0 {
		p.Users = make(map[string]string, len(cfg.Auth.Users)+1)
		for u, pw := range cfg.Auth.Users {
			p.Users[u] = pw
		}
		if cfg.Auth.Password != "" {
			p.Users["default"] = cfg.Auth.Password
		}
	}
	return p
}
