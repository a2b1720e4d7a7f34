package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestServeSentinelUpstream runs the binary on a configuration whose
// upstream is a module master set under Sentinel, with ack_replicas 1: it
// serves the primary, confirms writes on the replica, and across a
// SIGKILL of the primary reports not ready, logs the switch, moves its
// metrics to the promoted node, and serves it (whose writes, with no
// replica left, are answered as not confirmed).
func TestServeSentinelUpstream(t *testing.T) {
	if _, err := node.BuildModule(); err != nil {
		t.Fatal(err)
	}
	h := node.StartHAT(t, node.HAOptions{Role: node.Module})
	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir()}
	p.mapPath = filepath.Join(p.dir, "map.yaml")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), p.mapPath)
	cfg := fmt.Sprintf(`listen: %q
map: %q
upstreams:
  module-a:
    role: module
    sentinel:
      master: %s
      addresses: ["%s"]
    failover_wait: 5s
    ack_replicas: 1
    ack_timeout: 300ms
routes:
  - queues: ["*"]
    upstream: module-a
admin:
  listen: %q
timeouts:
  drain: 2s
`, p.listen, p.mapPath, h.Master, strings.Join(h.SentinelAddrs(), `", "`), p.admin)
	cfgPath := filepath.Join(p.dir, "emqproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.run(t, cfgPath)
	primary := func(addr string) string {
		return fmt.Sprintf(`emqproxy_upstream_primary{address=%q,upstream="module-a"}`, addr)
	}
	if got := p.metric(t, primary(h.Primary.Addr)); got != 1 {
		t.Fatalf("%s = %v", primary(h.Primary.Addr), got)
	}
	if got := rawCommand(t, p.listen, "SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET through the proxy: %q", got)
	}
	if got := rawCommand(t, h.Replica.Addr, "GET", "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("the replica holds k = %q", got)
	}

	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	p.waitReady(t, false)
	code, body, err := p.get("/readyz")
	t.Logf("/readyz during the switch: %d %q %v", code, body, err)
	if _, err := h.WaitPromoted(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.waitReady(t, true)
	waitLog(t, p, "upstream primary switched")
	if got := p.metric(t, `emqproxy_upstream_failovers_total{upstream="module-a"}`); got != 1 {
		t.Errorf("failovers_total = %v", got)
	}
	if got := p.metric(t, primary(h.Replica.Addr)); got != 1 {
		t.Errorf("%s = %v", primary(h.Replica.Addr), got)
	}
	if got := p.metric(t, primary(h.Primary.Addr)); got != 0 {
		t.Errorf("the old primary's info is still %v", got)
	}
	if got := rawCommand(t, p.listen, "GET", "k"); got != "$1\r\nv\r\n" {
		t.Errorf("GET through the proxy after the failover: %q", got)
	}
	want := "-UPSTREAM module-a write not confirmed by 1 replicas within "
	if got := rawCommand(t, p.listen, "SET", "k", "w"); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "; the command may have been applied\r\n") {
		t.Errorf("a write with no replica left: %q", got)
	}
}
