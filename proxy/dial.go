package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/emqproxy/emqproxy/fence"
)

// setupConn is the synchronous connection used before a connection joins
// the data path: the boot commands and the OnConnect hook (as a fence.Conn).
// An error reply is returned as a Reply of Type '-', not as an error.
type setupConn struct {
	nc  net.Conn
	rr  replyReader
	buf []byte
}

// Do implements fence.Conn.
func (c *setupConn) Do(ctx context.Context, args ...string) (fence.Reply, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(dl)
		defer func() { _ = c.nc.SetDeadline(time.Time{}) }()
	}
	c.buf = redcon.AppendArray(c.buf[:0], len(args))
	for _, a := range args {
		c.buf = redcon.AppendBulkString(c.buf, a)
	}
	if _, err := c.nc.Write(c.buf); err != nil {
		return fence.Reply{}, fmt.Errorf("%w: %w", ErrLost, err)
	}
	raw, _, err := c.rr.read(nil, -1)
	if err != nil {
		return fence.Reply{}, fmt.Errorf("%w: %w", ErrLost, err)
	}
	r, _, err := decodeReply(raw)
	if err != nil {
		return fence.Reply{}, err
	}
	return r, nil
}

// dialer opens upstream connections: dial, TLS, the boot commands, then the
// fence hook.
type dialer struct {
	opts UpstreamOptions
	hook OnConnectFunc
	// keys, when set, receives the node's command table, loaded on the
	// first connection that passes the fence (keysDone then holds).
	keys     *keyStore
	keysDone *atomic.Bool
}

// dial returns a connection ready for client traffic and its reader.
// fenceErr is true when the hook refused it.
func (d *dialer) dial(ctx context.Context) (nc net.Conn, br *bufio.Reader, fenceErr bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.DialTimeout)
	defer cancel()
	var nd net.Dialer
	nc, err = nd.DialContext(ctx, "tcp", d.opts.Address)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAlive(true)
	}
	if d.opts.TLSConfig != nil {
		tc := tls.Client(nc, d.opts.TLSConfig)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, nil, false, fmt.Errorf("%w: tls: %w", ErrUnavailable, err)
		}
		nc = tc
	}
	br = bufio.NewReaderSize(nc, readBufSize)
	sc := &setupConn{nc: nc, rr: replyReader{br: br}}
	if err := d.boot(ctx, sc); err != nil {
		_ = nc.Close()
		return nil, nil, false, err
	}
	if d.hook != nil {
		if err := d.hook(ctx, sc); err != nil {
			_ = nc.Close()
			return nil, nil, true, fmt.Errorf("%w: %w", ErrFence, err)
		}
	}
	if d.keys != nil && !d.keysDone.Load() {
		t, err := loadKeyTable(ctx, sc)
		if err != nil {
			_ = nc.Close()
			return nil, nil, false, err
		}
		d.keys.merge(t)
		d.keysDone.Store(true)
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, br, false, nil
}

// boot runs AUTH and SELECT as configured.
func (d *dialer) boot(ctx context.Context, c *setupConn) error {
	if d.opts.Password != "" {
		args := []string{"AUTH", d.opts.Password}
		if d.opts.Username != "" {
			args = []string{"AUTH", d.opts.Username, d.opts.Password}
		}
		r, err := c.Do(ctx, args...)
		if err != nil {
			return fmt.Errorf("%w: AUTH: %w", ErrBoot, err)
		}
		if r.IsError() {
			return fmt.Errorf("%w: AUTH: %s", ErrBoot, r.Str) // the password is never in the text
		}
	}
	if d.opts.DB != 0 {
		r, err := c.Do(ctx, "SELECT", strconv.Itoa(d.opts.DB))
		if err != nil {
			return fmt.Errorf("%w: SELECT: %w", ErrBoot, err)
		}
		if r.IsError() {
			return fmt.Errorf("%w: SELECT %d: %s", ErrBoot, d.opts.DB, r.Str)
		}
	}
	return nil
}
