package discovery

import (
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Defaults of Options.
const (
	DefaultDialTimeout = 2 * time.Second
	DefaultTimeout     = 2 * time.Second
	DefaultRefresh     = 5 * time.Second
)

// Backoff between two failed attempts: doubling from retryMin to retryMax.
// A +switch-master message, a subscription made or a caller's request cuts
// the wait short.
const (
	retryMin = 50 * time.Millisecond
	retryMax = 500 * time.Millisecond
)

// Options describe one master set under Sentinel, as an upstream's
// `sentinel:` section names it, and how to reach its nodes.
type Options struct {
	// Master is the master set's name (`sentinel monitor <name> ...`).
	Master string
	// Addresses are the sentinels' host:port addresses.
	Addresses []string
	// Username and Password authenticate to the sentinels (both empty:
	// no AUTH).
	Username string
	Password string
	// TLSConfig, when set, makes the connections to the sentinels TLS.
	TLSConfig *tls.Config
	// Node is how the data nodes are reached: the upstream's own
	// credentials and TLS, used for the ROLE check (and by ClientOption).
	Node NodeAuth
	// DialTimeout bounds a dial to a sentinel or a candidate
	// (DefaultDialTimeout when 0).
	DialTimeout time.Duration
	// Timeout bounds one exchange with a sentinel or a candidate
	// (DefaultTimeout when 0).
	Timeout time.Duration
	// Refresh is how often the sentinels are asked again although nothing
	// happened, which recovers from a missed message (DefaultRefresh when
	// 0; a negative value turns it off).
	Refresh time.Duration
}

// NodeAuth is how a data node is reached.
type NodeAuth struct {
	Username  string
	Password  string
	TLSConfig *tls.Config
}

// withDefaults fills in the zero durations.
func (o Options) withDefaults() Options {
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Refresh == 0 {
		o.Refresh = DefaultRefresh
	}
	o.Addresses = slices.Clone(o.Addresses)
	return o
}

// validate checks the options and names what is wrong.
func (o Options) validate() error {
	if o.Master == "" {
		return fmt.Errorf("%w: no master name", ErrOptions)
	}
	if len(o.Addresses) == 0 {
		return fmt.Errorf("%w: master %s: no sentinel address", ErrOptions, o.Master)
	}
	seen := make(map[string]bool, len(o.Addresses))
	for _, a := range o.Addresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%w: master %s: sentinel address %q is not host:port", ErrOptions, o.Master, a)
		}
		if seen[a] {
			return fmt.Errorf("%w: master %s: sentinel address %s given twice", ErrOptions, o.Master, a)
		}
		seen[a] = true
	}
	if o.DialTimeout < 0 || o.Timeout < 0 {
		return fmt.Errorf("%w: master %s: negative timeout", ErrOptions, o.Master)
	}
	return nil
}

// ClientOption returns a valkey-go client option that reaches the master
// set's primary through valkey-go's own Sentinel support (it asks the
// sentinels, checks ROLE and follows +switch-master itself, every Refresh
// as well), for the parts that speak to the primary as a client: the
// control table and the queue mover. The caller sets what else it needs
// (SelectDB, DisableCache, ...).
func (o Options) ClientOption() valkey.ClientOption {
	o = o.withDefaults()
	refresh := o.Refresh
	if refresh < 0 {
		refresh = 0 // valkey-go: 0 turns the periodic reconciliation off
	}
	return valkey.ClientOption{
		InitAddress: o.Addresses,
		Username:    o.Node.Username,
		Password:    o.Node.Password,
		TLSConfig:   o.Node.TLSConfig,
		Dialer:      net.Dialer{Timeout: o.DialTimeout},
		Sentinel: valkey.SentinelOption{
			MasterSet:               o.Master,
			Username:                o.Username,
			Password:                o.Password,
			TLSConfig:               o.TLSConfig,
			Dialer:                  net.Dialer{Timeout: o.DialTimeout},
			TopologyRefreshInterval: refresh,
		},
	}
}

// sentinelClientOption is the option of a plain client to one sentinel.
func (o Options) sentinelClientOption(addr string) valkey.ClientOption {
	return valkey.ClientOption{
		InitAddress:       []string{addr},
		Username:          o.Username,
		Password:          o.Password,
		TLSConfig:         o.TLSConfig,
		Dialer:            net.Dialer{Timeout: o.DialTimeout},
		ConnWriteTimeout:  o.Timeout,
		ForceSingleClient: true,
		DisableCache:      true,
		ClientSetInfo:     valkey.DisableClientSetInfo,
	}
}

// nodeClientOption is the option of the short-lived client of a ROLE check.
func (o Options) nodeClientOption(addr string) valkey.ClientOption {
	return valkey.ClientOption{
		InitAddress:       []string{addr},
		Username:          o.Node.Username,
		Password:          o.Node.Password,
		TLSConfig:         o.Node.TLSConfig,
		Dialer:            net.Dialer{Timeout: o.DialTimeout},
		ConnWriteTimeout:  o.Timeout,
		ForceSingleClient: true,
		DisableCache:      true,
		DisableRetry:      true,
		ClientSetInfo:     valkey.DisableClientSetInfo,
	}
}
