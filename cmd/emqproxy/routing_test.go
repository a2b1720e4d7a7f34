package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// routedConfig is a configuration with a module and a scripts upstream and
// the given routes (YAML list items).
func routedConfig(p *proc, module, scripts string, routes string) string {
	return fmt.Sprintf(`listen: %q
map: %q
upstreams:
  module-a:
    address: %q
    role: module
  scripts-b:
    address: %q
    role: scripts
routes:
%s
audit:
  sink: %q
admin:
  listen: %q
timeouts:
  drain: 5s
`, p.listen, p.mapPath, module, scripts, routes, p.auditPath, p.admin)
}

const (
	billingOnScripts = "  - queues: [\"billing\"]\n    upstream: scripts-b\n  - queues: [\"*\"]\n    upstream: module-a"
	allOnModule      = "  - queues: [\"*\"]\n    upstream: module-a"
)

// TestServeRoutesAndReloadsThem runs the binary in front of a module and a
// scripts node, then moves billing to the module node by editing the file
// and sending SIGHUP; a file that changes the upstream set is refused.
func TestServeRoutesAndReloadsThem(t *testing.T) {
	mod := node.StartT(t, node.Options{Role: node.Module})
	scr := node.StartT(t, node.Options{Role: node.Scripts})
	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir()}
	p.mapPath = filepath.Join(p.dir, "map.yaml")
	p.auditPath = filepath.Join(p.dir, "audit.log")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), p.mapPath)
	cfgPath := filepath.Join(p.dir, "emqproxy.yaml")
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(routedConfig(p, mod.Addr, scr.Addr, billingOnScripts))
	p.run(t, cfgPath)

	// One connection kept open across the reloads: it must not be dropped.
	nc, err := net.Dial("tcp", p.listen)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kept := &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
	kept.do("SET", "emq:{billing}:a", "1").is("+OK\r\n")
	if got := rawCommand(t, scr.Addr, "EXISTS", "emq:{billing}:a"); got != ":1\r\n" {
		t.Fatalf("billing key not on the scripts node: %q", got)
	}

	// A reload that changes the upstream set is refused; routes stay.
	write(strings.Replace(routedConfig(p, mod.Addr, scr.Addr, billingOnScripts), "routes:",
		"  scripts-c:\n    address: "+scr.Addr+"\n    role: scripts\nroutes:", 1))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "a reload cannot change: upstreams.scripts-c; restart to apply")
	kept.do("SET", "emq:{billing}:b", "1").is("+OK\r\n")
	if got := rawCommand(t, scr.Addr, "EXISTS", "emq:{billing}:b"); got != ":1\r\n" {
		t.Fatalf("routes changed by a refused reload: %q", got)
	}

	// Move billing to the module node.
	write(routedConfig(p, mod.Addr, scr.Addr, allOnModule))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "routes reloaded")
	kept.do("SET", "emq:{billing}:c", "1").is("+OK\r\n")
	if got := rawCommand(t, mod.Addr, "EXISTS", "emq:{billing}:c"); got != ":1\r\n" {
		t.Errorf("billing key not on the module node after the reload: %q", got)
	}
	if got := rawCommand(t, scr.Addr, "EXISTS", "emq:{billing}:c"); got != ":0\r\n" {
		t.Errorf("billing key on the scripts node after the reload: %q", got)
	}
}

// rawConn is one plain client connection for a transcript.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

// do sends one command and returns its reply.
func (c *rawConn) do(args ...string) rawReply {
	c.t.Helper()
	if _, err := c.nc.Write(resp.AppendCommand(nil, args...)); err != nil {
		c.t.Fatal(err)
	}
	b, err := resp.ReadReply(c.br)
	if err != nil {
		c.t.Fatal(err)
	}
	return rawReply{t: c.t, got: string(b)}
}

// rawReply is one reply's bytes.
type rawReply struct {
	t   *testing.T
	got string
}

// is asserts the reply.
func (r rawReply) is(want string) {
	r.t.Helper()
	if r.got != want {
		r.t.Errorf("reply %q, want %q", r.got, want)
	}
}
