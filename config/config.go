package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix is the prefix of every environment override.
const EnvPrefix = "EMQPROXY"

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("config: invalid")

// Config is the whole configuration. The yaml names are in the mapstructure
// tags; they are the names operators and scripts rely on (proxy.md).
type Config struct {
	// Listen is the client listener's address, or several separated by
	// commas (in the file, a YAML list too): host:port for TCP,
	// unix:/path/to.sock for a Unix socket (ListenAddrs).
	Listen string `mapstructure:"listen"`
	// ListenMode is the mode of each Unix socket's file, in octal
	// ("0660": the owner and the group may connect). Quoted in the file: a
	// bare 0660 is a number YAML may read as decimal or octal.
	ListenMode string              `mapstructure:"listen_mode"`
	TLS        ListenerTLS         `mapstructure:"tls"`
	Auth       Auth                `mapstructure:"auth"`
	Map        string              `mapstructure:"map"`
	Upstreams  map[string]Upstream `mapstructure:"upstreams"`
	Routes     []Route             `mapstructure:"routes"`
	Policy     Policy              `mapstructure:"policy"`
	Limits     Limits              `mapstructure:"limits"`
	Timeouts   Timeouts            `mapstructure:"timeouts"`
	Audit      Audit               `mapstructure:"audit"`
	Capture    Capture             `mapstructure:"capture"`
	Log        Log                 `mapstructure:"log"`
	Admin      Admin               `mapstructure:"admin"`
	Runtime    Runtime             `mapstructure:"runtime"`
	Control    Control             `mapstructure:"control"`
}

// Control configures the control table of moved queues (package control):
// off, routes come from the file alone.
type Control struct {
	// Enabled makes every proxy hold a lease on every upstream node and
	// read the moved queues' owners from the nodes (`emqproxy queue move`).
	Enabled bool `mapstructure:"enabled"`
	// Poll is how often leases are renewed and tables read.
	Poll time.Duration `mapstructure:"poll"`
	// Lease is the expiry of a proxy's lease on a node; at least twice Poll.
	Lease time.Duration `mapstructure:"lease"`
}

// ListenerTLS configures TLS on the client listener. Enabled when CertFile is set.
type ListenerTLS struct {
	CertFile string `mapstructure:"cert"`
	KeyFile  string `mapstructure:"key"`
	// ClientCA, when set, makes the listener require and verify client
	// certificates signed by it.
	ClientCA   string `mapstructure:"client_ca"`
	MinVersion string `mapstructure:"min_version"` // "1.2" (default) or "1.3"
}

// Auth configures client authentication.
type Auth struct {
	// Password, when set, is the password of the "default" user (AUTH pw).
	Password string `mapstructure:"password"`
	// Users maps named users to passwords (AUTH user pw).
	Users map[string]string `mapstructure:"users"`
	// FailDelay delays the reply to each failed AUTH past the first three
	// on a connection, doubling per failure up to 2s, against guessing.
	FailDelay time.Duration `mapstructure:"fail_delay"`
	// MaxFailures closes a connection after this many failed AUTHs.
	MaxFailures int `mapstructure:"max_failures"`
	// MaxFailDelay caps the delay of one failed AUTH's reply. Failures
	// are counted per source address, across connections.
	MaxFailDelay time.Duration `mapstructure:"max_fail_delay"`
	// Timeout closes a connection that has not authenticated this long
	// after it connected (when a password or users are set).
	Timeout time.Duration `mapstructure:"timeout"`
}

// UpstreamTLS configures TLS to an upstream. Enabled when Enabled is true.
type UpstreamTLS struct {
	Enabled            bool   `mapstructure:"enabled"`
	CA                 string `mapstructure:"ca"`
	CertFile           string `mapstructure:"cert"`
	KeyFile            string `mapstructure:"key"`
	ServerName         string `mapstructure:"server_name"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify"`
}

// Role values of an upstream.
const (
	RoleModule  = "module"
	RoleScripts = "scripts"
)

// Upstream is one named node: a fixed Address, or a master set under
// Sentinel (exactly one of the two).
type Upstream struct {
	Name     string      `mapstructure:"-"`
	Address  string      `mapstructure:"address"`
	Role     string      `mapstructure:"role"`
	Username string      `mapstructure:"username"`
	Password string      `mapstructure:"password"`
	DB       int         `mapstructure:"db"`
	Install  bool        `mapstructure:"install"`
	Conns    int         `mapstructure:"conns"`
	TLS      UpstreamTLS `mapstructure:"tls"`
	// Sentinel names a master set whose primary the sentinels give
	// (package discovery), instead of Address.
	Sentinel Sentinel `mapstructure:"sentinel"`
	// FailoverWait is how long a new command waits for the upstream's new
	// primary while it has none, before it gets an error; 0: at once.
	FailoverWait time.Duration `mapstructure:"failover_wait"`
	// AckReplicas, when positive, makes a write's reply wait until
	// `WAIT AckReplicas AckTimeout` confirms that many replicas have it.
	AckReplicas int `mapstructure:"ack_replicas"`
	// AckTimeout bounds that WAIT; required when AckReplicas is positive.
	AckTimeout time.Duration `mapstructure:"ack_timeout"`
}

// Route sends the queues matching any of its globs to an upstream.
type Route struct {
	Queues   []string `mapstructure:"queues"`
	Upstream string   `mapstructure:"upstream"`
}

// Policy values.
const (
	UnknownRefuse   = "refuse"
	UnknownReadonly = "readonly"
)

// Policy configures decisions.
type Policy struct {
	UnknownScripts string `mapstructure:"unknown_scripts"`
	// Deny replaces the default deny list when set (an empty list keeps it).
	Deny []string `mapstructure:"deny"`
	// Allow opens commands the deny list or the shared-connection rule
	// refuses ("LASTSAVE", "CONFIG SET"): the deny-list entries it names
	// and the rule's admin, dangerous and noscript classes. The rule's
	// other classes (reply, secret, blocking, database, protected keys)
	// never open.
	Allow []string `mapstructure:"allow"`
}

// Limits bound what one client may make the proxy hold.
type Limits struct {
	MaxClients     int   `mapstructure:"max_clients"`
	MaxMultibulk   int   `mapstructure:"max_multibulk"`
	MaxBulk        int64 `mapstructure:"max_bulk"`
	MaxInline      int   `mapstructure:"max_inline"`
	MaxPipeline    int   `mapstructure:"max_pipeline"`
	MaxReplyBytes  int64 `mapstructure:"max_reply_bytes"`
	MaxQueuedMulti int   `mapstructure:"max_queued_multi"`
	// BufferedBytes is the process-wide budget of bytes held for clients:
	// large commands being read, queued transactions, replies and
	// messages not yet written. Past it a client's input waits.
	BufferedBytes int64 `mapstructure:"buffered_bytes"`
	// ShareCommands and ShareBytes bound one client's share of a shared
	// upstream connection: commands in flight at once, and the size of one
	// command or of one part's replies; past them the client gets
	// connections of its own for IsolateFor after it was last heavy.
	ShareCommands int           `mapstructure:"share_commands"`
	ShareBytes    int64         `mapstructure:"share_bytes"`
	IsolateFor    time.Duration `mapstructure:"isolate_for"`
}

// Timeouts of the data path.
type Timeouts struct {
	Dial     time.Duration `mapstructure:"dial"`
	Upstream time.Duration `mapstructure:"upstream"` // a reply not back by then breaks the connection
	Write    time.Duration `mapstructure:"write"`    // writing replies to a client
	Drain    time.Duration `mapstructure:"drain"`    // SIGTERM: how long in-flight batches may finish
	// Probe is how often each upstream's fence is re-run on a connection of
	// its own, so a brand changed on a live node is noticed; 0 disables it.
	Probe time.Duration `mapstructure:"probe"`
	// Idle closes a client that sends nothing for this long; 0 = never.
	Idle time.Duration `mapstructure:"idle"`
	// Hold is the longest a command for a moving queue waits (control
	// table on); then it gets -TRYAGAIN and nothing is sent.
	Hold time.Duration `mapstructure:"hold"`
}

// Audit configures the audit log.
type Audit struct {
	Sink        string `mapstructure:"sink"` // stderr | stdout | a file path
	Passthrough bool   `mapstructure:"passthrough"`
}

// Capture configures the capture of job-core calls for a replay
// (`emqproxy verify --replay`). Queues empty: no capture at start; POST
// /capture on the admin port starts one at run time.
type Capture struct {
	// Queues are globs over queue names, as routes take them.
	Queues []string `mapstructure:"queues"`
	// Dir receives the capture files (rotated by size).
	Dir string `mapstructure:"dir"`
	// MaxBytes bounds all the capture files in Dir, those of earlier
	// captures and runs included: a start with no room left is refused,
	// and past it a capture stops, logged and counted; the data path never
	// waits for it.
	MaxBytes int64 `mapstructure:"max_bytes"`
	// Redact replaces the job data of every recorded call and command (and
	// of their replies) by same-length stand-ins keyed by a secret of each
	// capture's own (package capture).
	Redact bool `mapstructure:"redact"`
}

// Log configures the operational log.
type Log struct {
	Level  string `mapstructure:"level"`  // debug | info | warn | error
	Format string `mapstructure:"format"` // json | console
}

// Admin configures the admin HTTP listener.
type Admin struct {
	Listen string `mapstructure:"listen"` // "" disables it
	Pprof  bool   `mapstructure:"pprof"`
	// Token is the credential of the state-changing endpoints (POST
	// /reload, POST /capture, pprof), sent as "Authorization: Bearer
	// <token>"; required on every listener once set, and without it those
	// endpoints are served on a loopback-only listener only (package
	// admin). Prefer EMQPROXY_ADMIN_TOKEN or TokenFile to the file.
	Token string `mapstructure:"token"`
	// TokenFile is a file holding the token (a mounted Secret, a
	// credentials file); its trailing newline is dropped. Not with Token.
	TokenFile string `mapstructure:"token_file"`
}

// Runtime tunes the Go runtime.
type Runtime struct {
	// GOMAXPROCS, when positive, sets runtime.GOMAXPROCS; 0 leaves Go's
	// own choice (a P per core of the CPU quota or the host). The default
	// is 1: a sidecar shares its pod's cores with the application and the
	// server, and with one P a round trip wakes no other thread (with a P
	// per core, every wake-up of a goroutine also wakes an idle thread to
	// look for work: futex and epoll calls the data path does not need).
	// Measured in bench/: lower latency at pipeline 1, less CPU per command
	// at every depth. A shared proxy on a dedicated machine sets 0.
	GOMAXPROCS int `mapstructure:"gomaxprocs"`
	// SoftMemoryLimit keeps the runtime's soft memory limit at
	// limits.buffered_bytes plus 64 MiB and 64 KiB per connected client,
	// so the garbage of large commands and replies is collected before the
	// process grows to twice what it holds. A GOMEMLIMIT set in the
	// environment wins: the proxy then leaves the limit alone.
	SoftMemoryLimit bool `mapstructure:"soft_memory_limit"`
}

// Defaults returns every key's default value, the single source of the
// defaults documented in the README (those the proxy library has too are
// defaults.go's constants; durations as strings, as a file writes them).
func Defaults() map[string]any {
	return map[string]any{
		"listen":                    DefaultListen,
		"listen_mode":               "0660",
		"tls.min_version":           "1.2",
		"map":                       "stand/map.yaml",
		"policy.unknown_scripts":    UnknownRefuse,
		"policy.allow":              []string{},
		"limits.max_clients":        DefaultMaxClients,
		"limits.max_multibulk":      DefaultMaxMultibulk,
		"limits.max_bulk":           DefaultMaxBulk,
		"limits.max_inline":         DefaultMaxInline,
		"limits.max_pipeline":       DefaultMaxPipeline,
		"limits.max_reply_bytes":    DefaultMaxReplyBytes,
		"limits.max_queued_multi":   DefaultMaxQueuedMulti,
		"limits.buffered_bytes":     DefaultMaxBuffered,
		"limits.share_commands":     DefaultShareCommands,
		"limits.share_bytes":        DefaultShareBytes,
		"limits.isolate_for":        DefaultIsolateFor.String(),
		"timeouts.dial":             DefaultDialTimeout.String(),
		"timeouts.upstream":         DefaultUpstreamTimeout.String(),
		"timeouts.write":            DefaultWriteTimeout.String(),
		"timeouts.drain":            "10s",
		"timeouts.probe":            DefaultProbeInterval.String(),
		"timeouts.idle":             "0s",
		"timeouts.hold":             DefaultHold.String(),
		"control.enabled":           false,
		"control.poll":              DefaultControlPoll.String(),
		"control.lease":             DefaultControlLease.String(),
		"auth.fail_delay":           DefaultAuthFailDelay.String(),
		"auth.max_failures":         DefaultMaxAuthFailures,
		"auth.max_fail_delay":       DefaultMaxAuthFailDelay.String(),
		"auth.timeout":              DefaultAuthTimeout.String(),
		"audit.sink":                "stderr",
		"audit.passthrough":         false,
		"capture.queues":            []string{},
		"capture.dir":               "",
		"capture.max_bytes":         DefaultCaptureMaxBytes,
		"capture.redact":            true,
		"log.level":                 "info",
		"log.format":                "json",
		"admin.listen":              "127.0.0.1:9121",
		"admin.pprof":               false,
		"admin.token":               "",
		"admin.token_file":          "",
		"runtime.gomaxprocs":        1,
		"runtime.soft_memory_limit": true,
	}
}

// Load reads the file at path (may be "" for defaults and environment only),
// applies environment overrides and the flags that were set, and validates.
// A key of the file the configuration does not have, and an EMQPROXY_
// variable that names no key, are errors (env.go).
func Load(path string, flags *pflag.FlagSet) (*Config, error) {
	c, err := read(path, flags, os.Environ())
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// read is Load without the validation, with the environment given.
func read(path string, flags *pflag.FlagSet, environ []string) (*Config, error) {
	raw := map[string]any{}
	if path != "" {
		fv := viper.New()
		fv.SetConfigFile(path)
		fv.SetConfigType("yaml")
		if err := fv.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
		raw = fv.AllSettings()
		var errs []error
		for _, k := range unknownKeys(configType, raw, "") {
			errs = append(errs, k.errorIn(path))
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	v := viper.New()
	for k, val := range Defaults() {
		v.SetDefault(k, val)
	}
	b := &binder{raw: raw, env: environment(environ), vars: map[string]string{}}
	walkKeys(configType, "", b.names, b.visit)
	b.unknownVariables()
	if err := errors.Join(b.errs...); err != nil {
		return nil, err
	}
	if err := listenForms(raw); err != nil {
		return nil, err
	}
	if err := v.MergeConfigMap(raw); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	if flags != nil {
		var bindErr error
		flags.VisitAll(func(f *pflag.Flag) {
			if _, known := staticKeys[f.Name]; known {
				if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
					bindErr = err
				}
			}
		})
		if bindErr != nil {
			return nil, fmt.Errorf("config: %w", bindErr)
		}
	}
	var c Config
	if err := v.Unmarshal(&c, viper.DecodeHook(decodeHook)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for name, u := range c.Upstreams {
		u.Name = name
		if !v.IsSet("upstreams." + name + ".failover_wait") {
			u.FailoverWait = DefaultFailoverWait // 0 is a choice: the error at once
		}
		c.Upstreams[name] = u
	}
	return &c, nil
}

// Validate checks every value and names the key of each bad one.
func (c *Config) Validate() error {
	var p problems
	c.validateListen(&p)
	p.addr("admin.listen", c.Admin.Listen, true)
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		p.bad("tls", "cert and key must be set together")
	}
	if c.TLS.MinVersion != "1.2" && c.TLS.MinVersion != "1.3" {
		p.bad("tls.min_version", "%q is not 1.2 or 1.3", c.TLS.MinVersion)
	}
	if c.Map == "" {
		p.bad("map", "is empty")
	}
	c.validateUpstreams(&p)
	c.validateRoutes(&p)
	switch c.Policy.UnknownScripts {
	case UnknownRefuse, UnknownReadonly:
	default:
		p.bad("policy.unknown_scripts", "%q is not %s or %s", c.Policy.UnknownScripts, UnknownRefuse, UnknownReadonly)
	}
	for i, d := range c.Policy.Deny {
		if strings.TrimSpace(d) == "" {
			p.bad(fmt.Sprintf("policy.deny[%d]", i), "is empty")
		}
	}
	for i, a := range c.Policy.Allow {
		if strings.TrimSpace(a) == "" {
			p.bad(fmt.Sprintf("policy.allow[%d]", i), "is empty")
		}
	}
	c.validateLimits(&p)
	if c.Audit.Sink == "" {
		p.bad("audit.sink", "is empty (stderr, stdout or a file path)")
	}
	c.validateCapture(&p)
	c.validateAdmin(&p)
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.bad("log.level", "%q is not debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		p.bad("log.format", "%q is not json or console", c.Log.Format)
	}
	p.positive("timeouts.hold", int64(c.Timeouts.Hold))
	p.positive("control.poll", int64(c.Control.Poll))
	p.positive("control.lease", int64(c.Control.Lease))
	if c.Control.Poll > 0 && c.Control.Lease < 2*c.Control.Poll {
		p.bad("control.lease", "%v must be at least twice control.poll (%v): a lease renewed every poll must survive one missed renewal", c.Control.Lease, c.Control.Poll)
	}
	if c.Runtime.GOMAXPROCS < 0 {
		p.bad("runtime.gomaxprocs", "%d is negative", c.Runtime.GOMAXPROCS)
	}
	return errors.Join(p.errs...)
}

// problems collects Validate's findings, each naming its key and wrapping
// ErrInvalid, in the order they were found.
type problems struct{ errs []error }

// bad records that the value at key is unusable, and why.
func (p *problems) bad(key string, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...)))
}

// addr checks a host:port value; an empty one is bad unless optional.
func (p *problems) addr(key, addr string, optional bool) {
	if addr == "" {
		if !optional {
			p.bad(key, "is empty")
		}
		return
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		p.bad(key, "%q is not host:port", addr)
	}
}

// nodeAddr checks a node's address: host:port, or unix:/path for a node
// on the same host.
func (p *problems) nodeAddr(key, addr string) {
	if addr == "" {
		p.bad(key, "is empty")
		return
	}
	if _, _, err := netaddr.Parse(addr); err != nil {
		p.bad(key, "%s", addrProblem(err))
	}
}

// addrProblem is the text of netaddr.Parse's error, without its prefix.
func addrProblem(err error) string {
	return strings.TrimPrefix(err.Error(), netaddr.ErrInvalid.Error()+": ")
}

// positive checks a value that must be above zero.
func (p *problems) positive(key string, n int64) {
	if n <= 0 {
		p.bad(key, "%d must be positive", n)
	}
}

// validateUpstreams checks the upstreams, in name order.
func (c *Config) validateUpstreams(p *problems) {
	if len(c.Upstreams) == 0 {
		p.bad("upstreams", "no upstream is configured")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Upstreams)) {
		u := c.Upstreams[name]
		key := "upstreams." + name
		validateSource(p, key, u)
		validateFailover(p, key, u)
		validateAckTimeout(p, key, u, c.Timeouts.Upstream)
		if u.Role != RoleModule && u.Role != RoleScripts {
			p.bad(key+".role", "%q is not %s or %s", u.Role, RoleModule, RoleScripts)
		}
		if u.DB < 0 {
			p.bad(key+".db", "%d is negative", u.DB)
		}
		if u.Conns < 0 {
			p.bad(key+".conns", "%d is negative", u.Conns)
		}
		if (u.TLS.CertFile == "") != (u.TLS.KeyFile == "") {
			p.bad(key+".tls", "cert and key must be set together")
		}
	}
}

// validateRoutes checks the routes against the upstreams (checkRoutes).
func (c *Config) validateRoutes(p *problems) {
	if len(c.Routes) == 0 {
		p.bad("routes", "no route is configured; add one with queues: [\"*\"]")
		return
	}
	checkRoutes(p, c.Routes, c.UpstreamNames())
}

// CheckRoutes checks routes against the names of the upstreams there are:
// the rule of the configuration's routes, which package proxy applies to
// the routes it is given too (proxy.New, SwapRoutes). Every problem is
// named in the error, which wraps ErrInvalid; nil when rs is usable.
func CheckRoutes(rs []Route, upstreams []string) error {
	var p problems
	if len(rs) == 0 {
		p.bad("routes", "no route; the last must match every queue (\"*\")")
	}
	checkRoutes(&p, rs, upstreams)
	return errors.Join(p.errs...)
}

// checkRoutes checks the routes: each names one of upstreams and at least
// one pattern, every pattern is valid, and the last route matches every
// queue, so keyless commands have a default.
func checkRoutes(p *problems, rs []Route, upstreams []string) {
	for i, r := range rs {
		key := fmt.Sprintf("routes[%d]", i)
		if !slices.Contains(upstreams, r.Upstream) {
			p.bad(key+".upstream", "%q is not one of the upstreams (%s)", r.Upstream, strings.Join(upstreams, ", "))
		}
		if len(r.Queues) == 0 {
			p.bad(key+".queues", "is empty")
		}
		for j, q := range r.Queues {
			if !validGlob(q) {
				p.bad(fmt.Sprintf("%s.queues[%d]", key, j), "%q is not a valid pattern", q)
			}
		}
	}
	if len(rs) > 0 && !slices.Contains(rs[len(rs)-1].Queues, "*") {
		p.bad("routes", "the last route must match every queue (queues: [\"*\"]) so keyless commands have a default")
	}
}

// validateLimits checks the limits, timeouts and the AUTH failure limit.
func (c *Config) validateLimits(p *problems) {
	p.positive("limits.max_clients", int64(c.Limits.MaxClients))
	p.positive("limits.max_multibulk", int64(c.Limits.MaxMultibulk))
	p.positive("limits.max_bulk", c.Limits.MaxBulk)
	p.positive("limits.max_inline", int64(c.Limits.MaxInline))
	p.positive("limits.max_pipeline", int64(c.Limits.MaxPipeline))
	p.positive("limits.max_reply_bytes", c.Limits.MaxReplyBytes)
	p.positive("limits.max_queued_multi", int64(c.Limits.MaxQueuedMulti))
	p.positive("limits.buffered_bytes", c.Limits.BufferedBytes)
	p.positive("limits.share_commands", int64(c.Limits.ShareCommands))
	p.positive("limits.share_bytes", c.Limits.ShareBytes)
	p.positive("limits.isolate_for", int64(c.Limits.IsolateFor))
	p.positive("timeouts.dial", int64(c.Timeouts.Dial))
	p.positive("timeouts.upstream", int64(c.Timeouts.Upstream))
	p.positive("timeouts.write", int64(c.Timeouts.Write))
	p.positive("timeouts.drain", int64(c.Timeouts.Drain))
	p.positive("auth.fail_delay", int64(c.Auth.FailDelay))
	p.positive("auth.max_failures", int64(c.Auth.MaxFailures))
	p.positive("auth.max_fail_delay", int64(c.Auth.MaxFailDelay))
	p.positive("auth.timeout", int64(c.Auth.Timeout))
	if c.Auth.MaxFailDelay > 0 && c.Auth.FailDelay > c.Auth.MaxFailDelay {
		p.bad("auth.fail_delay", "%v is above auth.max_fail_delay (%v)", c.Auth.FailDelay, c.Auth.MaxFailDelay)
	}
	if c.Timeouts.Probe < 0 {
		p.bad("timeouts.probe", "%v is negative (0 disables the probe)", c.Timeouts.Probe)
	}
	if c.Timeouts.Idle < 0 {
		p.bad("timeouts.idle", "%v is negative (0 = never)", c.Timeouts.Idle)
	}
}

// validateCapture checks the capture section.
func (c *Config) validateCapture(p *problems) {
	for i, q := range c.Capture.Queues {
		if !validGlob(q) {
			p.bad(fmt.Sprintf("capture.queues[%d]", i), "%q is not a valid pattern", q)
		}
	}
	if len(c.Capture.Queues) > 0 && c.Capture.Dir == "" {
		p.bad("capture.dir", "is empty but capture.queues is set")
	}
	p.positive("capture.max_bytes", c.Capture.MaxBytes)
}

// validGlob reports whether p is a usable queue pattern: path.Match syntax
// over the queue name (the hashtag content).
func validGlob(p string) bool {
	if p == "" {
		return false
	}
	_, err := matchQueue(p, "")
	return err == nil
}

// UpstreamNames returns the configured upstream names, sorted.
func (c *Config) UpstreamNames() []string {
	return slices.Sorted(maps.Keys(c.Upstreams))
}

// ListenAddrs returns the client listener's addresses (listen), each
// host:port or unix:/path.
func (c *Config) ListenAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.Listen, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// SocketMode returns the mode of the Unix sockets' files (listen_mode;
// netaddr.DefaultMode when it does not parse, which Validate refuses).
func (c *Config) SocketMode() fs.FileMode {
	m, err := parseMode(c.ListenMode)
	if err != nil {
		return netaddr.DefaultMode
	}
	return m
}

// parseMode reads an octal permission mode such as "0660" or "660".
func parseMode(s string) (fs.FileMode, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "0o")
	if s == "" {
		return 0, errors.New("is empty")
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not an octal mode such as \"0660\"", s)
	}
	if n > 0o777 {
		return 0, fmt.Errorf("%q has bits beyond 0777 (only the permission bits are set)", s)
	}
	return fs.FileMode(n), nil
}

// validateListen checks the client listener's addresses and the mode of
// its Unix sockets.
func (c *Config) validateListen(p *problems) {
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		p.bad("listen", "is empty (host:port, unix:/path/to.sock, or several separated by commas)")
	}
	seen := map[string]bool{}
	unix := false
	for _, a := range addrs {
		if _, _, err := netaddr.Parse(a); err != nil {
			p.bad("listen", "%s", addrProblem(err))
		}
		if seen[a] {
			p.bad("listen", "%q is given twice", a)
		}
		seen[a] = true
		unix = unix || netaddr.IsUnix(a)
	}
	m, err := parseMode(c.ListenMode)
	switch {
	case err != nil:
		p.bad("listen_mode", "%v", err)
	case unix && m&0o600 != 0o600:
		p.bad("listen_mode", "%#o does not let the proxy's own user read and write its socket (0600 at least)", m)
	}
}

// listenForms turns the file's list of listen addresses into the one
// string Config.Listen holds, and refuses a listen_mode written as a bare
// number, whose digits YAML may have read as decimal or as octal.
func listenForms(raw map[string]any) error {
	for k, v := range raw {
		switch strings.ToLower(k) {
		case "listen":
			l, ok := v.([]any)
			if !ok {
				continue
			}
			parts := make([]string, 0, len(l))
			for i, el := range l {
				s, ok := el.(string)
				if !ok {
					return fmt.Errorf("%w: listen[%d]: %v is not an address", ErrInvalid, i, el)
				}
				parts = append(parts, s)
			}
			raw[k] = strings.Join(parts, ",")
		case "listen_mode":
			if _, ok := v.(string); !ok {
				return fmt.Errorf("%w: listen_mode: %v: quote the mode (listen_mode: \"0660\"): a bare number may be read as decimal", ErrInvalid, v)
			}
		}
	}
	return nil
}
