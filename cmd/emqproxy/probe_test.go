package main

import (
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

func TestServeReadyzFollowsTheFenceProbe(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	p := startProxy(t, up.Addr, "")
	rawCommand(t, up.Addr, "SET", "{emq}:version", "echomq:4.0.0") // rebranded behind the proxy's back
	p.waitReady(t, false)
	_, body, _ := p.get("/readyz")
	if !strings.Contains(body, "foreign brand") {
		t.Errorf("/readyz says %q, want the fence's finding", body)
	}
	if got := p.metric(t, `emqproxy_upstream_fenced{upstream="module-a"}`); got != 0 {
		t.Errorf("emqproxy_upstream_fenced = %v while the fence fails", got)
	}
	if got := rawCommand(t, p.listen, "SET", "x", "1"); !strings.HasPrefix(got, "-UPSTREAM module-a unavailable: ") {
		t.Errorf("a command while unfenced got %q", got)
	}
	if got := rawCommand(t, up.Addr, "EXISTS", "x"); got != ":0\r\n" {
		t.Errorf("the command reached the node: EXISTS = %q", got)
	}
	rawCommand(t, up.Addr, "SET", "{emq}:version", "echomq:6.0.0")
	p.waitReady(t, true)
	if got := p.metric(t, `emqproxy_upstream_fenced{upstream="module-a"}`); got != 1 {
		t.Errorf("emqproxy_upstream_fenced = %v after the brand was restored", got)
	}
	if got := rawCommand(t, p.listen, "SET", "x", "1"); got != "+OK\r\n" {
		t.Errorf("after the brand was restored: %q", got)
	}
}

func TestServeProbeIntervalFromConfig(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	t.Setenv("EMQPROXY_TIMEOUTS_PROBE", "0s") // disabled
	off := startProxy(t, up.Addr, "")
	t.Setenv("EMQPROXY_TIMEOUTS_PROBE", "50ms")
	fast := startProxy(t, up.Addr, "")
	rawCommand(t, up.Addr, "SET", "{emq}:version", "echomq:4.0.0")
	start := time.Now()
	fast.waitReady(t, false)
	t.Logf("a 50ms probe noticed the brand change in %v", time.Since(start).Round(time.Millisecond))
	// The disabled one keeps serving its open connection for a window
	// longer than the default interval (1s): nothing probes it.
	for time.Since(start) < 1500*time.Millisecond {
		if code, body, err := off.get("/readyz"); err != nil || code != 200 {
			t.Fatalf("with timeouts.probe 0 /readyz turned %d %q %v", code, body, err)
		}
		time.Sleep(50 * time.Millisecond) // observation interval
	}
}
