package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestServeSentinelUpstream runs the binary on a configuration whose
// upstream is a module master set under Sentinel, with ack_replicas 1: it
// serves the primary, confirms writes on the replica, and across a
// SIGKILL of the primary reports not ready, logs the switch, moves its
// metrics to the promoted node, and serves it (whose writes, with no
// replica left, are answered as not confirmed).
func TestServeSentinelUpstream(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the sentinels' down-after and failover): runs beside the other such tests
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
	if err != nil || code != 503 {
		t.Fatalf("/readyz during the switch: %d %v", code, err)
	}
	checkReadyz(t, body, "not ready", [][2]string{{"module-a", "not ready: "}})
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
	want := "-UPSTREAM module-a write not confirmed by 1 replicas "
	if got := rawCommand(t, p.listen, "SET", "k", "w"); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "; the command may have been applied\r\n") {
		t.Errorf("a write with no replica left: %q", got)
	}
}

// TestQueueMoveAcrossAFailover moves queue billing from a scripts master
// set under Sentinel to a module node: the mover is killed once the copy
// is verified, the source's primary is SIGKILLed and its replica promoted,
// and `queue move --resume`, finding the new primary through the same
// sentinel section, completes the move; every job enqueued before it is on
// the target exactly once, and the proxy routes the queue there.
func TestQueueMoveAcrossAFailover(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the sentinels' down-after and failover): runs beside the other such tests
	h := node.StartHAT(t, node.HAOptions{Role: node.Scripts})
	module := node.StartT(t, node.Options{Role: node.Module})
	s := &moveStand{dir: t.TempDir(), module: module}
	mapPath := filepath.Join(s.dir, "map.yaml")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), mapPath)
	var err error
	if s.m, err = shamap.Load(mapPath); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`map: %q
upstreams:
  module-a:
    address: %q
    role: module
  scripts-b:
    role: scripts
    sentinel:
      master: %s
      addresses: ["%s"]
    failover_wait: 5s
routes:
  - queues: ["billing"]
    upstream: scripts-b
  - queues: ["*"]
    upstream: module-a
audit:
  sink: stdout
control:
  enabled: true
  poll: 100ms
  lease: 1s
timeouts:
  drain: 2s
  hold: 5s
`, mapPath, module.Addr, h.Master, strings.Join(h.SentinelAddrs(), `", "`))
	s.cfg = filepath.Join(s.dir, "emqproxy.yaml")
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.dst = module.Client(t)
	p := s.proxy(t, "proxy1")
	waitRegistered(t, h.Primary.Client(t), 1)
	waitRegistered(t, s.dst, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := legacy.Dial(ctx, legacy.Options{Addr: p.listen, Map: s.m, Brand: s.m.LegacyBrand})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("BEFORE-%02d", i)
		if ok, err := c.Enqueue(ctx, "billing", id, "p"); err != nil || !ok {
			t.Fatalf("enqueue %s: %v %v", id, ok, err)
		}
		ids = append(ids, id)
	}

	s.killAfter(t, "copied", "move", "billing", "--to", "module-a")
	// Everything the source's primary holds has reached its replica.
	src := h.Primary.Client(t)
	err = src.Dedicated(func(dc valkey.DedicatedClient) error {
		if err := dc.Do(ctx, dc.B().Set().Key("replicated").Value("1").Build()).Error(); err != nil {
			return err
		}
		n, err := dc.Do(ctx, dc.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64()
		if err == nil && n != 1 {
			err = fmt.Errorf("WAIT 1 answered %d", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	promoted, err := h.WaitPromoted(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.waitReady(t, true)

	out, err := s.run(t, "move", "billing", "--resume")
	if err != nil {
		t.Fatalf("resume after the failover: %v", err)
	}
	if !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Errorf("the resumed move's report: %s", out)
	}
	for _, id := range ids {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("job %s is in %d sets of the target", id, n)
		}
	}
	// The proxy routes billing to the target now (it may hold the first
	// command until it has applied the flip).
	if ok, err := c.Enqueue(ctx, "billing", "AFTER", "p"); err != nil || !ok {
		t.Fatalf("enqueue after the move: %v %v", ok, err)
	}
	if inSets(t, s.dst, "billing", "AFTER") != 1 || inSets(t, promoted.Client(t), "billing", "AFTER") != 0 {
		t.Errorf("the proxy did not route billing to module-a after the move")
	}
}
