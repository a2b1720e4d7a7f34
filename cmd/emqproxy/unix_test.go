package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestServeUnixSocket runs the binary with a Unix socket beside TCP, in
// front of a node reached over its own Unix socket: a stale file at the
// path is replaced at start, the file gets listen_mode, a second proxy on
// the same path is refused while the first serves, a proxy killed with
// SIGKILL leaves its file and the next start replaces it, and SIGTERM
// removes it.
func TestServeUnixSocket(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "emqsrv") // short: sun_path holds 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	nodeSock := filepath.Join(sockDir, "node.sock")
	sock := filepath.Join(sockDir, "proxy.sock")
	node.StartT(t, node.Options{Role: node.Module, Args: []string{"--unixsocket", nodeSock, "--unixsocketperm", "700"}})

	// A stale file: a socket bound and closed without being removed, as a
	// killed process leaves it.
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()

	dir := t.TempDir()
	mapPath := filepath.Join(dir, "map.yaml")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), mapPath)
	start := func() *proc {
		p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir(), mapPath: mapPath}
		cfg := fmt.Sprintf(`listen:
  - %q
  - "unix:%s"
listen_mode: "0600"
map: %q
upstreams:
  module-a:
    address: "unix:%s"
    role: module
routes:
  - queues: ["*"]
    upstream: module-a
audit:
  sink: %q
admin:
  listen: %q
timeouts:
  drain: 2s
`, p.listen, sock, mapPath, nodeSock, filepath.Join(p.dir, "audit.log"), p.admin)
		cfgPath := filepath.Join(p.dir, "emqproxy.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		p.start(t, cfgPath)
		return p
	}
	pingBoth := func(p *proc) {
		t.Helper()
		for _, a := range []string{p.listen, "unix:" + sock} {
			if got := unixOrTCPDo(t, a, "PING"); got != "+PONG\r\n" {
				t.Errorf("PING on %s: %q", a, got)
			}
		}
		if got := unixOrTCPDo(t, "unix:"+sock, "EMQ.VERSION"); !strings.HasPrefix(got, "*") && !strings.HasPrefix(got, "$") {
			t.Errorf("EMQ.VERSION through the Unix socket to the node's Unix socket: %q", got)
		}
	}

	first := start()
	first.waitReady(t, true)
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file %v %v, want a socket with mode 0600 (listen_mode)", fi, err)
	}
	pingBoth(first)

	second := start()
	err = waitExit(second, 10*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("a second proxy on the live socket: exit %v, want a failure", err)
	}
	if b, _ := os.ReadFile(second.stderr.Name()); !strings.Contains(string(b), "another process listens on the socket") {
		t.Errorf("the second proxy's refusal does not say why:\n%s", b)
	}
	pingBoth(first) // the refusal left the first proxy's socket alone

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = waitExit(first, 10*time.Second)
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("a SIGKILLed proxy left no socket file (%v): the next start proves nothing", err)
	}

	third := start()
	third.waitReady(t, true)
	pingBoth(third)
	if err := third.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(third, 15*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket file after a clean stop: %v, want it removed", err)
	}
}

// waitExit waits for p's process to exit and returns Wait's error.
func waitExit(p *proc, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("still running after %v", d)
	}
}

// unixOrTCPDo sends one command to addr (host:port or unix:/path) and
// returns the reply's first line.
func unixOrTCPDo(t *testing.T, addr string, args ...string) string {
	t.Helper()
	network, address := "tcp", addr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, address = "unix", p
	}
	nc, err := net.DialTimeout(network, address, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(resp.AppendCommand(nil, args...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := nc.Read(buf)
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	return line + "\n"
}
