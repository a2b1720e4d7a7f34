package proxy

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/stand/node"
)

// unixDir is a directory for Unix sockets whose paths fit sun_path (a
// test's TempDir may be too long), removed at cleanup.
func unixDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "emqux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// unixNode starts a node that also listens on a Unix socket, and returns
// it with the socket's unix:/path address.
func unixNode(t testing.TB, o node.Options) (*node.Node, string) {
	t.Helper()
	sock := filepath.Join(unixDir(t), "node.sock")
	o.Args = append(o.Args, "--unixsocket", sock, "--unixsocketperm", "700")
	return node.StartT(t, o), netaddr.UnixPrefix + sock
}

// serveAll starts a proxy with opts on the listeners of Listen(addrs),
// and shuts it down at cleanup (ServeAll must end with ErrServerClosed).
func serveAll(t testing.TB, opts Options, addrs string) (*Server, []net.Listener) {
	t.Helper()
	srv, err := New(opts, zap.NewNop(), zap.NewNop())
	if err != nil {
		t.Fatalf("new proxy: %v", err)
	}
	lns, err := Listen(addrs, opts.SocketMode)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeAll(lns) }()
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
	poll(t, "proxy ready", srv.Ready)
	return srv, lns
}

// TestUnixFidelity: a client on the proxy's Unix socket, the proxy on the
// node's Unix socket, gets the replies a client of an identical node gets
// over TCP, byte for byte: passed-through commands, transactions, blocking
// commands, EVALSHA of pinned verb scripts rewritten to the module's
// commands, errors. A client on the TCP listener beside it gets the same.
func TestUnixFidelity(t *testing.T) { node.EachServer(t, testUnixFidelity) }

func testUnixFidelity(t *testing.T, srv node.Server) {
	for _, name := range []string{"unix", "tcp"} {
		t.Run(name, func(t *testing.T) {
			direct := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
			n, up := unixNode(t, node.Options{Server: srv.Path, Role: node.Module})
			sock := filepath.Join(unixDir(t), "proxy.sock")
			p, lns := serveAll(t, Options{
				Upstream: UpstreamOptions{Name: "node", Address: up},
				Policy:   testPolicy(t),
			}, "127.0.0.1:0,unix:"+sock)
			h := &harness{t: t, node: n, srv: p, addr: lns[0].Addr().String()}
			c := h.dial()
			if name == "unix" {
				c = dialPath(t, sock)
			}
			steps := fidelityCorpus(t, h)
			want := runCorpus(t, dial(t, direct.Addr), steps, false)
			got := runCorpus(t, c, steps, true)
			for i := range steps {
				w, g := string(want[i]), string(got[i])
				if steps[i].clock {
					w, g = maskClock(want[i]), maskClock(got[i])
				}
				if w != g {
					t.Errorf("step %d %q:\n direct %s\n proxy  %s", i, short(steps[i].direct), short(string(want[i])), short(string(got[i])))
				}
			}
		})
	}
}

// dialPath opens a raw client connection to the Unix socket at path.
func dialPath(t testing.TB, path string) *client {
	t.Helper()
	return dial(t, netaddr.UnixPrefix+path)
}

// TestUnixClientInfo: a session on the Unix socket shows the socket's path
// and :0 as its addr and laddr in CLIENT INFO and CLIENT LIST, as the
// server itself shows its own Unix clients.
func TestUnixClientInfo(t *testing.T) {
	n, up := unixNode(t, node.Options{Role: node.Module})
	sock := filepath.Join(unixDir(t), "proxy.sock")
	serveAll(t, Options{Upstream: UpstreamOptions{Name: "node", Address: up}, Policy: testPolicy(t)}, "unix:"+sock)
	_ = n
	addrField := regexp.MustCompile(` addr=(\S*) laddr=(\S*) `)
	direct := dialPath(t, up[len(netaddr.UnixPrefix):])
	m := addrField.FindSubmatch(direct.do("CLIENT", "INFO").got)
	if m == nil || string(m[1]) != up[len(netaddr.UnixPrefix):]+":0" || !bytes.Equal(m[1], m[2]) {
		t.Fatalf("the node's own Unix client: %q (the format this test expects of the proxy)", m)
	}
	c := dialPath(t, sock)
	want := sock + ":0"
	for _, args := range [][]string{{"CLIENT", "INFO"}, {"CLIENT", "LIST"}} {
		m := addrField.FindSubmatch(c.do(args...).got)
		if m == nil || string(m[1]) != want || string(m[2]) != want {
			t.Errorf("%s: addr, laddr = %q, want %q for both", args, m, want)
		}
	}
}

// TestUnixSubscribe: a subscriber on the Unix socket gets its messages.
func TestUnixSubscribe(t *testing.T) {
	_, up := unixNode(t, node.Options{Role: node.Module})
	sock := filepath.Join(unixDir(t), "proxy.sock")
	serveAll(t, Options{Upstream: UpstreamOptions{Name: "node", Address: up}, Policy: testPolicy(t)}, "unix:"+sock)
	sub := dialPath(t, sock)
	sub.do("SUBSCRIBE", "ch").is("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")
	pub := dialPath(t, sock)
	pub.do("PUBLISH", "ch", "hello").is(":1\r\n")
	sub.read().is("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n")
}

// TestUnixSocketLifecycle: the proxy's socket file has the mode asked,
// a second proxy on the same path is refused while the first serves, and
// the file is gone once the first has stopped.
func TestUnixSocketLifecycle(t *testing.T) {
	_, up := unixNode(t, node.Options{Role: node.Module})
	sock := filepath.Join(unixDir(t), "proxy.sock")
	opts := Options{Upstream: UpstreamOptions{Name: "node", Address: up}, Policy: testPolicy(t), SocketMode: 0o600}
	p, err := New(opts, zap.NewNop(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	lns, err := Listen("unix:"+sock, opts.SocketMode)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.ServeAll(lns) }()
	poll(t, "proxy ready", p.Ready)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket file %v %v, want a socket with 0600", fi, err)
	}
	dialPath(t, sock).do("PING").is("+PONG\r\n")
	if _, err := Listen("unix:"+sock, 0o600); !errors.Is(err, netaddr.ErrInUse) {
		t.Errorf("a second listener on the live socket: %v, want ErrInUse", err)
	}
	dialPath(t, sock).do("PING").is("+PONG\r\n") // the refusal left the first alone
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("serve returned %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file after a clean stop: %v, want it removed", err)
	}
}
