package upstream

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/emqproxy/emqproxy/discovery"
	"github.com/emqproxy/emqproxy/fence"
)

// Defaults applied by WithDefaults to zero-valued Options fields, for an
// upstream used alone. Package proxy gives its upstreams the
// configuration's defaults first (config/defaults.go); cmd/emqproxy's
// defaults test keeps these equal to them.
const (
	DefaultDialTimeout     = 2 * time.Second
	DefaultUpstreamTimeout = 5 * time.Second
)

// OnConnectFunc runs on every new upstream connection, after the boot
// commands (AUTH, SELECT) and before the connection carries any client
// byte. A non-nil error closes the connection; the upstream is then not
// served (clients get `-UPSTREAM <name> unavailable: <error text>`) until a
// later connection passes. The fence check is installed here.
//
// c is valid only during the call and must not be kept. A typical hook:
//
//	func(ctx context.Context, c fence.Conn) error {
//		_, err := fence.CheckModule(ctx, c, m, install)
//		return err
//	}
type OnConnectFunc func(ctx context.Context, c fence.Conn) error

// Options describes one upstream node.
type Options struct {
	// Name names the upstream in errors, logs, metrics and routes (default
	// "upstream").
	Name string
	// Role is what the node runs: RoleModule (verb calls are rewritten to
	// EMQ.<TOKEN>) or RoleScripts (they pass unchanged as EVALSHA).
	Role Role
	// OnConnect is this upstream's fence hook (see Options.OnConnect),
	// used when the upstream is one of Options.Upstreams.
	OnConnect OnConnectFunc
	// Address is host:port: a fixed node. Exactly one of Address and
	// Sentinel is set.
	Address string
	// Sentinel, when set, names a master set under Sentinel instead of a
	// fixed node: every connection goes to the primary the sentinels name
	// and ROLE confirms, and the upstream follows it across failovers
	// (failover.go). Its Node credentials are this upstream's own
	// (Username, Password, TLSConfig), whatever the field holds.
	Sentinel *discovery.Options
	// FailoverWait is how long a new command waits for a Sentinel
	// upstream's new primary while it has none (counted from the moment
	// its connection was lost), before it gets `-UPSTREAM <name> has no
	// primary: <reason>`; 0: the error at once. Ignored for a fixed
	// Address, whose commands get the unavailable error at once.
	FailoverWait time.Duration
	// AckReplicas, when positive, makes the upstream answer a write only
	// after `WAIT AckReplicas AckTimeout`, sent after the batch's last
	// write on the same connection, confirms that many replicas have it;
	// a write not confirmed gets an explicit error instead of its reply
	// (ack.go). 0: writes are answered as the primary answers them.
	AckReplicas int
	// AckTimeout bounds that WAIT (required when AckReplicas is positive).
	AckTimeout time.Duration
	// Username and Password, when Password is set, are sent with AUTH on
	// every new connection (AUTH <password> when Username is empty).
	Username string
	Password string
	// DB, when not 0, is selected on every new connection.
	DB int
	// ClientName, when not "", names every connection on the server
	// (CLIENT SETNAME, after AUTH and SELECT): with the control table on,
	// the proxy's data connections, which a mover closes on a queue's
	// source when it waited the proxy's lease out (package control's
	// latewriters.go). The name a client sets is the proxy's to answer and
	// never reaches the server.
	ClientName string
	// TLSConfig, when not nil, makes the upstream connections speak TLS.
	TLSConfig *tls.Config
	// Conns is the number of shared pipelined connections (default 1: one
	// connection coalesces best; more dilute the batching).
	Conns int
	// DialTimeout bounds dialing plus the boot commands and the fence
	// (default DefaultDialTimeout, 2s).
	DialTimeout time.Duration
	// Timeout is how long a shared connection may go without a reply while
	// commands wait on it (default DefaultUpstreamTimeout, 5s); then it is
	// closed and every waiting command gets an error. Dedicated connections
	// (blocking commands, WATCH, subscriptions) have no reply timeout.
	Timeout time.Duration
	// ProbeInterval is how often the fence is re-run on a short-lived
	// connection of its own while the upstream is up (default
	// DefaultProbeInterval; negative disables the probe). A refusal marks
	// the upstream not fenced and closes its shared connections (probe.go).
	// Without an OnConnect hook there is nothing to probe.
	ProbeInterval time.Duration
	// MaxCombinedWrites is package pipe's Options.MaxCombinedWrites for
	// every connection of the upstream (0: pipe.DefaultMaxCombinedWrites).
	MaxCombinedWrites int
}

// WithDefaults returns u with every zero value replaced by its default.
func (u Options) WithDefaults() Options {
	if u.Name == "" {
		u.Name = "upstream"
	}
	positiveOr(&u.Conns, 1)
	positiveOr(&u.DialTimeout, DefaultDialTimeout)
	positiveOr(&u.Timeout, DefaultUpstreamTimeout)
	if u.ProbeInterval == 0 {
		u.ProbeInterval = DefaultProbeInterval
	}
	return u
}

// positiveOr sets *v to def unless *v is positive: a zero (or negative)
// option takes its documented default.
func positiveOr[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Role is what an upstream node runs.
type Role uint8

// The roles.
const (
	// RoleModule: a module node; pinned verb calls are rewritten to
	// EMQ.<TOKEN>, no Lua write reaches it.
	RoleModule Role = iota
	// RoleScripts: a scripts node running the legacy Lua; every script
	// call passes unchanged.
	RoleScripts
)

// String names the role as the configuration does.
func (r Role) String() string {
	if r == RoleScripts {
		return "scripts"
	}
	return "module"
}
