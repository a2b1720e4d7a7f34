package proxy

import (
	"crypto/tls"
	"io/fs"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/proxy/session"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Defaults applied by New to zero-valued Options fields: the
// configuration's (package config's defaults.go, where they are defined
// once), so a Server built from Options alone behaves as the daemon does
// with an empty file.
const (
	// DefaultListen is the client listener address.
	DefaultListen         = config.DefaultListen
	DefaultMaxClients     = config.DefaultMaxClients
	DefaultMaxPipeline    = config.DefaultMaxPipeline
	DefaultMaxReplyBytes  = config.DefaultMaxReplyBytes
	DefaultMaxQueuedMulti = config.DefaultMaxQueuedMulti
	// DefaultShareCommands, DefaultShareBytes and DefaultIsolateFor bound
	// one client's share of a shared upstream connection (share.go).
	DefaultShareCommands = config.DefaultShareCommands
	DefaultShareBytes    = config.DefaultShareBytes
	DefaultIsolateFor    = config.DefaultIsolateFor
	// DefaultMaxMultibulk, DefaultMaxBulk and DefaultMaxInline are the
	// client input framer's limits (package resp).
	DefaultMaxMultibulk = config.DefaultMaxMultibulk
	DefaultMaxBulk      = config.DefaultMaxBulk
	DefaultMaxInline    = config.DefaultMaxInline
	// DefaultMaxQueryBuffer is redis's client-query-buffer-limit (1 GiB):
	// the most one incomplete command may make the proxy buffer. The
	// configuration has no key for it.
	DefaultMaxQueryBuffer = 1024 * 1024 * 1024
	DefaultWriteTimeout   = config.DefaultWriteTimeout
	// DefaultDialTimeout, DefaultUpstreamTimeout and DefaultProbeInterval
	// are given to the upstreams whose options leave them zero.
	DefaultDialTimeout     = config.DefaultDialTimeout
	DefaultUpstreamTimeout = config.DefaultUpstreamTimeout
	DefaultProbeInterval   = config.DefaultProbeInterval
)

// OnConnectFunc is an upstream's fence hook (package upstream).
type OnConnectFunc = upstream.OnConnectFunc

// Defaults of the limits on authentication (package session's
// authlimit.go).
const (
	DefaultAuthFailDelay   = config.DefaultAuthFailDelay
	DefaultMaxAuthFailures = config.DefaultMaxAuthFailures
	// DefaultMaxAuthFailDelay is the default cap on the delay of one reply.
	DefaultMaxAuthFailDelay = config.DefaultMaxAuthFailDelay
	// DefaultAuthTimeout is the default time a client has to authenticate.
	DefaultAuthTimeout = config.DefaultAuthTimeout
)

// DefaultMaxBuffered is the default process-wide budget
// (config.DefaultMaxBuffered says why it is what it is).
const DefaultMaxBuffered = config.DefaultMaxBuffered

// Options configures a Server. Zero values take the documented defaults.
//
// Defaults and validation are the configuration's (package config): New
// applies config's defaults to the zero fields and checks the upstreams'
// replica acknowledgement (config.CheckAck) and the routes
// (config.CheckRoutes, SwapRoutes too) by the configuration's own rules,
// so Options built by a test, bench/ or an embedder are held to what a
// file is. What a file alone has (its keys, the syntax of addresses, TLS
// files) config checks when it loads; what only a running server knows
// (an upstream set fixed until a restart, unique upstream names, a
// policy) New and SwapRoutes check.
type Options struct {
	// Listen is the client listener address for ListenAndServe
	// (default DefaultListen, "127.0.0.1:6380"), or several separated by
	// commas; each host:port, or unix:/path/to.sock for a Unix socket.
	Listen string
	// SocketMode is the mode of each Unix socket's file ListenAndServe
	// makes (default netaddr.DefaultMode, 0660).
	SocketMode fs.FileMode
	// TLSConfig, when not nil, makes the client listener speak TLS.
	TLSConfig *tls.Config

	// Upstream is the single-upstream shorthand: when Upstreams is empty,
	// it is the one upstream (with OnConnect as its hook and Role as set),
	// and every command goes to it.
	Upstream UpstreamOptions
	// OnConnect is Upstream's fence hook (the shorthand): run on every
	// upstream connection (shared or dedicated) before it carries client
	// traffic. nil: none, and the upstream counts as fenced as soon as it
	// is connected. Ignored when Upstreams is set (each has its own).
	OnConnect OnConnectFunc

	// Upstreams are several named upstreams, each with its role and fence
	// hook. When set, Upstream and OnConnect are ignored; names must be
	// unique. The set is fixed for the server's life (route.go).
	Upstreams []UpstreamOptions
	// Routes send queues to upstreams by name (route.go): first match
	// wins, and the last route must match every queue ("*"). Empty: every
	// command goes to the first upstream. SwapRoutes replaces them.
	Routes []Route
	// Control, when not nil, turns on the control table (control.go):
	// moved queues' owners read from the nodes, leases, held commands.
	Control *ControlOptions

	// Policy is the decision policy (map, deny list, users). Required.
	// SwapPolicy replaces it at run time.
	Policy *rewrite.Policy

	// MaxClients is the most client connections served at once
	// (default 10000); one more gets `-ERR max number of clients reached`.
	MaxClients int
	// MaxMultibulk is the largest multibulk count accepted
	// (default DefaultMaxMultibulk).
	MaxMultibulk int
	// MaxBulk is the largest bulk length accepted (default 512 MiB).
	MaxBulk int64
	// MaxInline is the longest inline command or header line (default 64 KiB).
	MaxInline int
	// MaxQueryBuffer is the most bytes one incomplete command may make the
	// proxy buffer for a client (default 1 GiB); over it the client is
	// closed, as redis does.
	MaxQueryBuffer int64
	// MaxPipeline is the most commands of one client decided and forwarded
	// as one batch (default 1024); the rest waits for the next round.
	MaxPipeline int
	// MaxReplyBytes caps the reply bytes one client batch may accumulate
	// (default 64 MiB). A batch over it closes the client.
	MaxReplyBytes int64
	// ShareCommands is the most commands of one client in flight on a
	// shared upstream connection at once (default 64): a longer batch is
	// sent in parts, other clients' batches between them (share.go).
	ShareCommands int
	// ShareBytes is the most bytes of one command, or of one part's
	// replies, a client sends or gets on a shared connection (default
	// 1 MiB); past it the client gets connections of its own (share.go).
	ShareBytes int64
	// IsolateFor is how long a client stays on connections of its own
	// after it was last heavy for a shared one (default 30s; share.go).
	IsolateFor time.Duration
	// MaxQueuedMulti is the most commands one MULTI may queue (default
	// 10000); one more is answered with an error and aborts the transaction.
	MaxQueuedMulti int
	// MaxBuffered is the process-wide budget of bytes held for clients
	// (default DefaultMaxBuffered, 128 MiB): large commands being read,
	// queued transactions, replies and messages not yet written. A client
	// whose command does not fit waits, one larger than the whole budget
	// is refused (budget.go).
	MaxBuffered int64

	// SoftMemoryLimit keeps the runtime's soft memory limit at MaxBuffered
	// plus a fixed part and an allowance per connected client (memlimit.go),
	// so the garbage of large commands and replies is collected before the
	// process grows to twice what it holds. It sets a process-wide knob:
	// for one Server per process.
	SoftMemoryLimit bool

	// IdleTimeout closes a client that sends nothing for this long
	// (0 = never, like redis's default `timeout 0`).
	IdleTimeout time.Duration
	// WriteTimeout bounds writing one batch of replies to a client
	// (default DefaultWriteTimeout, 30s); over it the client is closed.
	WriteTimeout time.Duration

	// AuthFailDelay is the delay before the reply to a client's first
	// failed AUTH (or HELLO AUTH) past the free ones; it doubles with each
	// further failure, up to MaxAuthFailDelay (default 100ms; authlimit.go).
	AuthFailDelay time.Duration
	// MaxAuthFailDelay caps the delay of one failed AUTH's reply (default
	// DefaultMaxAuthFailDelay, 2s).
	MaxAuthFailDelay time.Duration
	// MaxAuthFailures is how many failed AUTHs one connection may make; the
	// last one's WRONGPASS is written, then the client is closed (default 10).
	MaxAuthFailures int
	// AuthTimeout closes a client that has not authenticated this long
	// after it connected, while the policy has users (default
	// DefaultAuthTimeout, 10s; authlimit.go).
	AuthTimeout time.Duration

	// AuditPassthrough also audits commands that pass unchanged.
	AuditPassthrough bool
	// Capture, when set with queues, starts a capture of those queues
	// with the server (package observe); StartCapture and StopCapture start and
	// stop one at run time.
	Capture *CaptureOptions
	// Registry, when not nil, receives the proxy's metrics.
	Registry prometheus.Registerer

	// Hooks are calls the sessions make around their sends, for tests
	// (package session's Hooks); the zero value has none.
	Hooks Hooks
	// Transport gives the sessions their upstream connections (package
	// upstream's Transport); nil: upstream.Direct, the upstreams' own.
	Transport upstream.Transport
}

// Hooks are the sessions' test hooks (package session).
type Hooks = session.Hooks

// UpstreamOptions describes one upstream node (package upstream).
type UpstreamOptions = upstream.Options

// withDefaults returns o with every zero value replaced by its default.
func (o Options) withDefaults() Options {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.SocketMode == 0 {
		o.SocketMode = netaddr.DefaultMode
	}
	positiveOr(&o.MaxClients, DefaultMaxClients)
	positiveOr(&o.MaxMultibulk, DefaultMaxMultibulk)
	positiveOr(&o.MaxBulk, DefaultMaxBulk)
	positiveOr(&o.MaxInline, DefaultMaxInline)
	positiveOr(&o.MaxQueryBuffer, DefaultMaxQueryBuffer)
	positiveOr(&o.MaxPipeline, DefaultMaxPipeline)
	positiveOr(&o.MaxReplyBytes, DefaultMaxReplyBytes)
	positiveOr(&o.MaxQueuedMulti, DefaultMaxQueuedMulti)
	positiveOr(&o.ShareCommands, DefaultShareCommands)
	positiveOr(&o.ShareBytes, DefaultShareBytes)
	positiveOr(&o.IsolateFor, DefaultIsolateFor)
	positiveOr(&o.WriteTimeout, DefaultWriteTimeout)
	positiveOr(&o.AuthFailDelay, DefaultAuthFailDelay)
	positiveOr(&o.MaxAuthFailures, DefaultMaxAuthFailures)
	positiveOr(&o.MaxAuthFailDelay, DefaultMaxAuthFailDelay)
	positiveOr(&o.AuthTimeout, DefaultAuthTimeout)
	positiveOr(&o.MaxBuffered, DefaultMaxBuffered)
	if len(o.Upstreams) == 0 {
		u := o.Upstream
		if o.OnConnect != nil {
			u.OnConnect = o.OnConnect
		}
		o.Upstreams = []UpstreamOptions{u}
	} else {
		o.Upstreams = append([]UpstreamOptions(nil), o.Upstreams...)
	}
	for i := range o.Upstreams {
		u := &o.Upstreams[i]
		positiveOr(&u.DialTimeout, DefaultDialTimeout)
		positiveOr(&u.Timeout, DefaultUpstreamTimeout)
		if u.ProbeInterval == 0 {
			u.ProbeInterval = DefaultProbeInterval
		}
		*u = u.WithDefaults()
	}
	o.Upstream = o.Upstreams[0]
	return o
}

// positiveOr sets *v to def unless *v is positive: a zero (or negative)
// option takes its documented default.
func positiveOr[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
