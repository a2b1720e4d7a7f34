package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// testTimeout bounds every wait of a test.
const testTimeout = 15 * time.Second

// testPolicy is the policy over the stand's pinned map.
func testPolicy(t testing.TB) *rewrite.Policy {
	t.Helper()
	m, err := shamap.Load(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		t.Fatalf("load map: %v", err)
	}
	return &rewrite.Policy{Map: m}
}

// harness is a proxy in front of a node, on a loopback port.
type harness struct {
	t    testing.TB
	node *node.Node
	srv  *Server
	addr string
}

// startProxy starts a proxy to n, applies mod to its options, and waits
// until it is ready.
func startProxy(t testing.TB, n *node.Node, mod func(*Options)) *harness {
	t.Helper()
	return startProxyLogged(t, n, mod, zap.NewNop(), nil)
}

// startProxyLogged is startProxy with the proxy's log and audit loggers
// (New's).
func startProxyLogged(t testing.TB, n *node.Node, mod func(*Options), log, audit *zap.Logger) *harness {
	t.Helper()
	opts := Options{
		Upstream: UpstreamOptions{Name: "node", Address: n.Addr, Password: n.Opts.Password},
		Policy:   testPolicy(t),
	}
	if mod != nil {
		mod(&opts)
	}
	srv, addr := serveProxy(t, opts, log, audit)
	h := &harness{t: t, node: n, srv: srv, addr: addr}
	h.waitReady()
	return h
}

// serveProxy starts a proxy with opts on a free loopback port, shuts it
// down at cleanup (Serve must end with ErrServerClosed), and returns it with
// its address. It does not wait for readiness.
func serveProxy(t testing.TB, opts Options, log, audit *zap.Logger) (*Server, string) {
	t.Helper()
	srv, err := New(opts, log, audit)
	if err != nil {
		t.Fatalf("new proxy: %v", err)
	}
	addr := "127.0.0.1:0"
	if os.Getenv(testListenVariable) == "unix" {
		addr = netaddr.UnixPrefix + filepath.Join(unixDir(t), "proxy.sock")
	}
	ln, err := netaddr.Listen(addr, netaddr.DefaultMode)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	if !netaddr.IsUnix(addr) {
		addr = ln.Addr().String()
	}
	return srv, serveOn(t, srv, ln, addr)
}

// testListenVariable, set to "unix", makes the proxies of serveProxy (and
// so of startProxy) listen on a Unix socket, and the tests' clients dial
// it: EMQPROXY_TEST_LISTEN=unix go test ./proxy/ runs the session suites
// (isolation, shares, modes, pub/sub, transactions) over a Unix socket.
const testListenVariable = "EMQPROXY_TEST_LISTEN"

// serveOn serves ln until cleanup, and returns addr.
func serveOn(t testing.TB, srv *Server, ln net.Listener, addr string) string {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("serve returned %v", err)
		}
	})
	return addr
}

// waitReady polls until the proxy is ready.
func (h *harness) waitReady() {
	h.t.Helper()
	poll(h.t, "proxy ready", func() bool { return h.srv.Ready() })
}

// poll calls cond until it is true or the test's deadline passes.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	node.Poll(t, what, cond)
}

// client is a raw RESP connection for transcripts.
type client struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

// dial opens a raw connection to addr, closed at cleanup.
func dial(t testing.TB, addr string) *client {
	t.Helper()
	network, address := netaddr.Split(addr) // host:port or unix:/path
	nc, err := net.DialTimeout(network, address, testTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(testTimeout))
	return &client{t: t, nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
}

// dial opens a client connection to the proxy.
func (h *harness) dial() *client { return dial(h.t, h.addr) }

// send writes commands without reading replies.
func (c *client) send(cmds ...[]string) {
	c.t.Helper()
	var b []byte
	for _, args := range cmds {
		b = resp.AppendCommand(b, args...)
	}
	c.write(b)
}

// write writes raw bytes.
func (c *client) write(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads one reply.
func (c *client) read() reply {
	c.t.Helper()
	b, err := resp.ReadReply(c.br)
	if err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	return reply{t: c.t, got: b}
}

// do sends one command and reads its reply.
func (c *client) do(args ...string) reply {
	c.t.Helper()
	c.send(args)
	return c.read()
}

// closed asserts the server closed the connection (after any bytes already read).
func (c *client) closed() {
	c.t.Helper()
	b, err := io.ReadAll(c.br)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		c.t.Fatalf("expected EOF, got %v (after %q)", err, b)
	}
	if len(b) != 0 {
		c.t.Fatalf("expected EOF, got %q", b)
	}
}

// reply is one reply's exact bytes.
type reply struct {
	t   testing.TB
	got []byte
}

// is asserts the reply's bytes.
func (r reply) is(want string) {
	r.t.Helper()
	if string(r.got) != want {
		r.t.Errorf("reply %q, want %q", r.got, want)
	}
}

// hasPrefix asserts the reply starts with p.
func (r reply) hasPrefix(p string) {
	r.t.Helper()
	if !strings.HasPrefix(string(r.got), p) {
		r.t.Errorf("reply %q, want prefix %q", r.got, p)
	}
}

// cmd builds one command's args.
func cmd(args ...string) []string { return args }
