package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/resp"
)

// SetupConn is the synchronous connection used before a connection joins
// the data path: the boot commands and the OnConnect hook (as a fence.Conn).
// An error reply is returned as a Reply of Type '-', not as an error.
type SetupConn struct {
	Conn net.Conn
	RR   resp.Reader
	buf  []byte
}

// Do implements fence.Conn.
func (c *SetupConn) Do(ctx context.Context, args ...string) (fence.Reply, error) {
	raw, err := c.Raw(ctx, args...)
	if err != nil {
		return fence.Reply{}, err
	}
	r, _, err := fence.Decode(raw)
	if err != nil {
		return fence.Reply{}, err
	}
	return r, nil
}

// Raw sends one command and returns its reply's bytes.
func (c *SetupConn) Raw(ctx context.Context, args ...string) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.Conn.SetDeadline(dl)
		defer func() { _ = c.Conn.SetDeadline(time.Time{}) }()
	}
	c.buf = resp.AppendArray(c.buf[:0], len(args))
	for _, a := range args {
		c.buf = resp.AppendBulkString(c.buf, a)
	}
	if _, err := c.Conn.Write(c.buf); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLost, err)
	}
	raw, _, err := c.RR.Read(nil, -1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLost, err)
	}
	return raw, nil
}

// helloStore keeps the server's own HELLO reply in each protocol, cut
// around the connection id, so that a client's HELLO gets the server's
// fields (server, version, proto, mode, role, modules) with the id of the
// client's session: the proxy's own field.
type helloStore struct {
	t [2]atomic.Pointer[helloTemplate] // RESP2, RESP3
}

// helloTemplate is a HELLO reply without its id's value.
type helloTemplate struct{ head, tail []byte }

// helloID is what precedes the id's value in a HELLO reply.
var helloID = []byte("$2\r\nid\r\n:")

// has reports whether proto's reply is known.
func (h *helloStore) has(proto int) bool { return h.t[proto-2].Load() != nil }

// set keeps raw, the reply to HELLO in protocol proto (ignored when it has
// no id field).
func (h *helloStore) set(proto int, raw []byte) {
	i := bytes.Index(raw, helloID)
	if i < 0 {
		return
	}
	j := bytes.Index(raw[i+len(helloID):], []byte("\r\n"))
	if j < 0 {
		return
	}
	h.t[proto-2].Store(&helloTemplate{head: raw[:i+len(helloID)], tail: raw[i+len(helloID)+j:]})
}

// reply is the server's HELLO reply in protocol proto with id, or nil
// while none is known.
func (h *helloStore) reply(proto int, id int64) []byte {
	if h == nil || proto < 2 || proto > 3 {
		return nil
	}
	t := h.t[proto-2].Load()
	if t == nil {
		return nil
	}
	b := make([]byte, 0, len(t.head)+len(t.tail)+20)
	b = append(b, t.head...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, t.tail...)
}

// dialer opens upstream connections: dial, TLS, the boot commands, then the
// fence hook.
type dialer struct {
	opts Options
	hook OnConnectFunc
	// keys, when set, receives the node's command table, loaded on the
	// first connection that passes the fence (keysDone then holds).
	keys     *cmdtable.Store
	keysDone *atomic.Bool
	// hello, when set, receives the server's HELLO reply in each protocol,
	// from the first connection of that protocol.
	hello *helloStore
	// unsub, when set, receives the server's answer to the unsubscribe
	// family outside subscribe mode (unsub.go), from the first
	// connection that passes the fence.
	unsub *unsubProbe
	// fol, when set, gives a Sentinel upstream's address (failover.go).
	fol *follower
}

// Dialed is a connection the dialer opened: the socket, its reader (which
// may hold buffered bytes) and the address it was dialed at.
type Dialed struct {
	Conn net.Conn
	Buf  *bufio.Reader
	addr string
}

// dial returns a connection ready for client traffic in protocol proto (2
// or 3). fenceErr is true when the hook refused it. The address is the
// fixed one, or a Sentinel upstream's primary (failover.go), whose role is
// checked after the boot and before the fence. The boot, the role, the
// fence and the command table speak RESP2; a RESP3 connection sends HELLO
// 3 last.
func (d *dialer) dial(ctx context.Context, proto int) (dl Dialed, fenceErr bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.DialTimeout)
	defer cancel()
	addr := d.opts.Address
	if d.fol != nil {
		if addr, err = d.fol.address(ctx); err != nil {
			return Dialed{}, false, err
		}
	}
	nc, br, fenceErr, err := d.open(ctx, addr, proto)
	if err != nil {
		if d.fol != nil && !fenceErr {
			d.fol.failed(addr, err)
		}
		return Dialed{}, fenceErr, err
	}
	if d.fol != nil {
		d.fol.connected(addr)
	}
	return Dialed{Conn: nc, Buf: br, addr: addr}, false, nil
}

// open dials addr and readies the connection (see dial).
func (d *dialer) open(ctx context.Context, addr string, proto int) (nc net.Conn, br *bufio.Reader, fenceErr bool, err error) {
	var nd net.Dialer
	nc, err = netaddr.DialContext(ctx, &nd, addr) // host:port, or unix:/path on the same host
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAlive(true)
	}
	if d.opts.TLSConfig != nil {
		tc := tls.Client(nc, verifyHost(d.opts.TLSConfig, addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, nil, false, fmt.Errorf("%w: tls: %w", ErrUnavailable, err)
		}
		nc = tc
	}
	br = bufio.NewReaderSize(nc, pipe.ReadBufSize)
	sc := &SetupConn{Conn: nc, RR: resp.NewReader(br)}
	if err := d.boot(ctx, sc); err != nil {
		_ = nc.Close()
		return nil, nil, false, err
	}
	if d.fol != nil {
		// A Sentinel upstream's node must be the primary before the fence
		// runs on it (failover.go).
		if err := checkRole(ctx, sc, addr); err != nil {
			_ = nc.Close()
			return nil, nil, false, err
		}
	}
	if d.hook != nil {
		if err := d.hook(ctx, sc); err != nil {
			_ = nc.Close()
			return nil, nil, true, fmt.Errorf("%w: %w", ErrFence, err)
		}
	}
	if d.keys != nil && !d.keysDone.Load() {
		t, err := cmdtable.Load(ctx, sc)
		if err != nil {
			_ = nc.Close()
			return nil, nil, false, fmt.Errorf("%w: %w", ErrBoot, err)
		}
		d.keys.Merge(t)
		d.keysDone.Store(true)
	}
	if d.unsub != nil {
		if err := d.unsub.probe(ctx, sc); err != nil {
			_ = nc.Close()
			return nil, nil, false, err
		}
	}
	if proto == 3 || (d.hello != nil && !d.hello.has(2)) {
		args := []string{"HELLO"}
		if proto == 3 {
			args = append(args, "3")
		}
		raw, err := sc.Raw(ctx, args...)
		if err == nil && raw[0] == '-' {
			err = fmt.Errorf("%w: %s: %s", ErrBoot, strings.Join(args, " "), bytes.TrimSpace(raw[1:]))
		}
		if err != nil {
			_ = nc.Close()
			return nil, nil, false, err
		}
		if d.hello != nil {
			d.hello.set(proto, raw)
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, br, false, nil
}

// boot runs AUTH, SELECT and CLIENT SETNAME as configured.
func (d *dialer) boot(ctx context.Context, c *SetupConn) error {
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
	if d.opts.ClientName != "" {
		r, err := c.Do(ctx, "CLIENT", "SETNAME", d.opts.ClientName)
		if err != nil {
			return fmt.Errorf("%w: CLIENT SETNAME: %w", ErrBoot, err)
		}
		if r.IsError() {
			return fmt.Errorf("%w: CLIENT SETNAME %s: %s", ErrBoot, d.opts.ClientName, r.Str)
		}
	}
	return nil
}

// verifyHost returns cfg to dial addr with: cfg itself when it names the
// server (server_name), else a copy that verifies the host dialed, as
// crypto/tls's own dialers do (a Sentinel upstream's primary: its own).
func verifyHost(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return cfg
	}
	cfg = cfg.Clone()
	cfg.ServerName = host
	return cfg
}
