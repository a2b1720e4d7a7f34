package legacy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"
)

// Client is one wire-4 connector. It is safe for concurrent use; calls made
// at the same time share one pipelining connection, as the connector's
// callers do.
type Client struct {
	opts    Options
	scripts map[string]*script

	// mu is held for reading by every call and for writing while Reconnect
	// or Close replaces vc, so a call never runs on a client being closed.
	mu     sync.RWMutex
	vc     valkey.Client // nil after Close or a failed Reconnect
	down   error         // why vc is nil
	closed bool          // Close was called

	stopped atomic.Pointer[FenceError] // set by a fence refusal on any connection
	fences  atomic.Int64               // fences passed, one per connection opened

	recMu sync.Mutex
}

// Dial connects to opts.Addr: boot commands, then the wire-4 fence. A fence
// refusal is returned as a *FenceError (errors.As), and no client.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	if opts.Addr == "" {
		return nil, fmt.Errorf("%w: no address", ErrBoot)
	}
	sc, err := loadScripts(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{opts: opts, scripts: sc}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.vc, err = c.connect(); err != nil {
		return nil, err
	}
	return c, nil
}

// connect creates a valkey-go client whose every connection runs the boot
// commands and the fence (see dialConn).
func (c *Client) connect() (valkey.Client, error) {
	vc, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:       []string{c.opts.Addr},
		DialCtxFn:         c.dialConn,
		Dialer:            net.Dialer{Timeout: c.opts.DialTimeout},
		AlwaysRESP2:       true,
		DisableCache:      true,
		DisableRetry:      true,
		ForceSingleClient: true,
		PipelineMultiplex: -1, // one pipelining connection
		BlockingPoolSize:  c.opts.PoolSize,
		ClientSetInfo:     valkey.DisableClientSetInfo,
	})
	if err != nil {
		if vc != nil {
			vc.Close()
		}
		var fe *FenceError
		if errors.As(err, &fe) {
			return nil, fe
		}
		return nil, fmt.Errorf("legacy: connect %s: %w", c.opts.Addr, err)
	}
	return vc, nil
}

// Reconnect closes the client's connections and connects again, so the boot
// commands and the fence run again. It waits for calls in flight. It also
// restarts a client a fence refusal had stopped; a new refusal stops it
// again and is returned. After a failed Reconnect every call returns its
// error until the next successful Reconnect.
func (c *Client) Reconnect(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.vc != nil {
		c.vc.Close()
		c.vc = nil
	}
	c.stopped.Store(nil)
	vc, err := c.connect()
	if err != nil {
		c.down = err
		return err
	}
	c.vc, c.down = vc, nil
	return nil
}

// Close closes the client. Calls after Close return ErrClosed.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vc != nil {
		c.vc.Close()
		c.vc = nil
	}
	c.down, c.closed = ErrClosed, true
}

// Fences returns how many connections passed the fence so far (the first
// connect, valkey-go's transparent reconnects, dedicated connections, and
// Reconnect).
func (c *Client) Fences() int64 { return c.fences.Load() }

// Stopped returns the fence refusal that stopped the client, or nil.
func (c *Client) Stopped() error {
	if fe := c.stopped.Load(); fe != nil {
		return fe
	}
	return nil
}

func (c *Client) stop(fe *FenceError) { c.stopped.Store(fe) }

// acquire returns the valkey-go client for one call, holding mu for reading
// until release is called.
func (c *Client) acquire() (valkey.Client, func(), error) {
	c.mu.RLock()
	if fe := c.stopped.Load(); fe != nil {
		c.mu.RUnlock()
		return nil, nil, fe
	}
	if c.vc == nil {
		err := c.down
		c.mu.RUnlock()
		if err == nil {
			err = ErrClosed
		}
		return nil, nil, err
	}
	return c.vc, c.mu.RUnlock, nil
}

func (c *Client) record(call Call) {
	if c.opts.Record == nil {
		return
	}
	c.recMu.Lock()
	defer c.recMu.Unlock()
	c.opts.Record(call)
}

// failure wraps an error of a call: a fence refusal that happened on a
// reconnect during the call is returned as the *FenceError itself.
func (c *Client) failure(op string, err error) error {
	if fe := c.stopped.Load(); fe != nil {
		var got *FenceError
		if !errors.As(err, &got) {
			return fmt.Errorf("legacy: %s: %w", op, fe)
		}
	}
	return fmt.Errorf("legacy: %s: %w", op, err)
}
