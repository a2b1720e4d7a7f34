package jobmix

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

func TestConfigRefused(t *testing.T) {
	ok := Config{Mode: Legacy, Addr: "127.0.0.1:1", Clients: 1, Pipeline: 1, Duration: time.Second}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"mode", func(c *Config) { c.Mode = "lua" }},
		{"address", func(c *Config) { c.Addr = "" }},
		{"no clients", func(c *Config) { c.Clients = 0 }},
		{"pipeline", func(c *Config) { c.Pipeline = 0 }},
		{"no window", func(c *Config) { c.Duration = 0 }},
		{"too long", func(c *Config) { c.Duration = MaxDuration + time.Second }},
		{"payload", func(c *Config) { c.Payload = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			if _, err := Run(context.Background(), c); !errors.Is(err, ErrConfig) {
				t.Fatalf("Run = %v, want ErrConfig", err)
			}
		})
	}
}

// runAndCheck runs a short mix and checks, on the node, that the jobs the
// run counted were really completed.
func runAndCheck(t *testing.T, cfg Config, n *node.Node) Result {
	t.Helper()
	cfg.Clients, cfg.Warmup, cfg.Duration, cfg.Payload = 2, 100*time.Millisecond, 400*time.Millisecond, 16
	cfg.Tag = "t" + strconv.Itoa(cfg.Pipeline) + string(cfg.Mode)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Ops <= 0 || res.Ops%int64(cfg.Pipeline) != 0 || res.OpsPerSec <= 0 {
		t.Fatalf("ops %d (%.0f/s) at pipeline %d", res.Ops, res.OpsPerSec, cfg.Pipeline)
	}
	if res.Samples == 0 || res.P50us <= 0 || res.P99us < res.P50us {
		t.Fatalf("latency: %d samples, p50 %v p99 %v", res.Samples, res.P50us, res.P99us)
	}
	var done int64
	for i := range cfg.Clients {
		reply, err := node.RawDo(n.Addr, "ZCARD", legacy.Key(Queue(cfg.Tag, i), "done"))
		if err != nil || len(reply) < 2 || reply[0] != ':' {
			t.Fatalf("ZCARD done: %q %v", reply, err)
		}
		c, _ := strconv.ParseInt(string(bytes.TrimSpace(reply[1:])), 10, 64)
		done += c
	}
	// Each counted cycle is 3 × pipeline ops; the warmup completed more.
	if done < res.Ops/3 {
		t.Fatalf("%d jobs done on the node, but the run counted %d ops", done, res.Ops)
	}
	return res
}

func TestLegacyOnScripts(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Scripts})
	for _, p := range []int{1, 4} {
		runAndCheck(t, Config{Mode: Legacy, Addr: n.Addr, Pipeline: p}, n)
	}
}

func TestNativeOnModule(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	for _, p := range []int{1, 4} {
		runAndCheck(t, Config{Mode: Native, Addr: n.Addr, Pipeline: p}, n)
	}
}

// TestLegacyThroughProxy drives the proxy in front of a module node: every
// script call is rewritten to EMQ.*, and the module's rows show the work.
func TestLegacyThroughProxy(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	m, err := shamap.Load(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(proxy.Options{Upstream: proxy.UpstreamOptions{Address: n.Addr}, Policy: &rewrite.Policy{Map: m}}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	for deadline := time.Now().Add(10 * time.Second); !srv.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("proxy not ready: %v", srv.Readiness())
		}
	}
	for _, p := range []int{1, 4} {
		runAndCheck(t, Config{Mode: Legacy, Addr: ln.Addr().String(), Pipeline: p}, n)
	}
	reply, err := node.RawDo(n.Addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(reply, []byte("cmdstat_emq.claim:")) || bytes.Contains(reply, []byte("cmdstat_evalsha:")) {
		t.Fatalf("the module node should see EMQ.CLAIM and no EVALSHA:\n%s", reply)
	}
}

// TestKeepGoing kills the clients' connections on the node in the middle
// of the window: with KeepGoing the run counts the failed calls, the
// clients reconnect and go on, and the run ends with its window.
func TestKeepGoing(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	cfg := Config{Mode: Native, Addr: n.Addr, Clients: 2, Pipeline: 1, Warmup: 100 * time.Millisecond,
		Duration: 800 * time.Millisecond, PauseRead: true, KeepGoing: true, Tag: "keep"}
	killed := make(chan error, 1)
	go func() {
		time.Sleep(cfg.Warmup + cfg.Duration/3)
		_, err := node.RawDo(n.Addr, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
		killed <- err
	}()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	if res.Errors < 1 || res.FirstError == "" {
		t.Fatalf("errors %d (%q), want the killed calls counted", res.Errors, res.FirstError)
	}
	// Each client has at most one call in flight when the window ends; one
	// waiting 100 ms or more then (stalled) is what a loaded machine may
	// show, not a fault of the run, so it is bounded, not forbidden.
	if res.Ops <= 0 || res.Stalled > cfg.Clients {
		t.Fatalf("ops %d, stalled %d (of %d clients)", res.Ops, res.Stalled, cfg.Clients)
	}
	t.Logf("%d ops, %d errors (first: %s)", res.Ops, res.Errors, res.FirstError)
}
