package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestFailedFenceClosesAWatchPin: a client WATCHes (its own pinned
// connection), then the node's brand changes behind the proxy's back. Once
// the probe finds the fence broken, the pin is closed with the shared
// connections: the client's MULTI / SET / EXEC gets the upstream's fence
// error and the write never reaches the node.
func TestFailedFenceClosesAWatchPin(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		n := node.StartT(t, node.Options{Role: node.Module, Server: srv.Path})
		h := startProxy(t, n, func(o *Options) {
			o.OnConnect = moduleHook(t)
			o.Upstream.ProbeInterval = 20 * time.Millisecond
		})
		w := h.dial()
		w.do("WATCH", "wk").is("+OK\r\n")
		b := h.dial()
		b.do("BLPOP", "list", "0.01").is("*-1\r\n") // a blocking connection of its own
		u := h.srv.Upstream()
		if got := u.Owned(); got != 2 {
			t.Fatalf("the upstream holds %d owned connections, want 2 (the pin, the blocking one)", got)
		}
		if _, err := node.RawDo(n.Addr, "SET", "{emq}:version", "acme:1.0.0"); err != nil {
			t.Fatal(err)
		}
		poll(t, "the probe to fail the fence", func() bool { return errors.Is(h.srv.Readiness(), fence.ErrForeignBrand) })
		poll(t, "the owned connections to close", func() bool { return u.Owned() == 0 })
		w.do("MULTI").is("+OK\r\n")
		w.do("SET", "wk", "fenced-write").is("+QUEUED\r\n")
		r := w.do("EXEC")
		r.hasPrefix("-UPSTREAM node unavailable: ")
		if !strings.Contains(string(r.got), "fence") {
			t.Errorf("EXEC answered %q, want the fence error", r.got)
		}
		if got := nodeDo(t, n, "EXISTS", "wk"); got != ":0\r\n" {
			t.Errorf("the write landed on the unfenced node: EXISTS wk %q", got)
		}
		b.do("BLPOP", "list", "0.01").hasPrefix("-UPSTREAM node unavailable: ")
	})
}

// TestOwnedConnectionsAreGivenBack: the connections the upstream hands out
// leave its registry when their holder lets them go (UNWATCH's EXEC, a
// subscriber leaving, the client going away), so the registry does not grow.
func TestOwnedConnectionsAreGivenBack(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	u := h.srv.Upstream()
	c := h.dial()
	c.do("WATCH", "k").is("+OK\r\n")
	c.do("MULTI").is("+OK\r\n")
	c.do("EXEC").is("*0\r\n")
	poll(t, "the pin to be given back", func() bool { return u.Owned() == 0 })
	c.do("SUBSCRIBE", "ch").hasPrefix("*3\r\n$9\r\nsubscribe\r\n")
	if got := u.Owned(); got != 1 {
		t.Errorf("a subscriber holds %d owned connections, want 1", got)
	}
	c.do("UNSUBSCRIBE").hasPrefix("*3\r\n$11\r\nunsubscribe\r\n")
	poll(t, "the subscriber's connection to be given back", func() bool { return u.Owned() == 0 })
	d := h.dial()
	d.do("BLPOP", "l", "0.01").is("*-1\r\n")
	_ = d.nc.Close()
	poll(t, "the blocking connection to be given back", func() bool { return u.Owned() == 0 })
}
