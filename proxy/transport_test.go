package proxy

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/stand/node"
)

// kindsTransport is upstream.Direct, noting the kinds the sessions ask
// for; the kinds in down get no connection.
type kindsTransport struct {
	mu    sync.Mutex
	asked map[upstream.Kind]int
	down  map[upstream.Kind]bool
}

func (k *kindsTransport) Conn(ctx context.Context, u *upstream.Upstream, r upstream.Request) (upstream.Conn, error) {
	k.mu.Lock()
	k.asked[r.Kind]++
	down := k.down[r.Kind]
	k.mu.Unlock()
	if down {
		return upstream.Conn{}, nil
	}
	return upstream.Direct.Conn(ctx, u, r)
}

func (k *kindsTransport) count(kind upstream.Kind) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.asked[kind]
}

// TestTransportGivesEveryConnection: every connection a session uses
// comes from Options.Transport, each of its kind: a shared one for GET,
// a dedicated one for WATCH, a blocking one for BLPOP, one of its own for
// SUBSCRIBE; and a Transport that gives no shared connection leaves a
// command unavailable.
func TestTransportGivesEveryConnection(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	tr := &kindsTransport{asked: map[upstream.Kind]int{}, down: map[upstream.Kind]bool{}}
	h := startProxy(t, n, func(o *Options) { o.Transport = tr })
	c := h.dial()
	c.do("SET", "k", "v").is("+OK\r\n")
	if tr.count(upstream.KindShared) == 0 {
		t.Error("SET asked for no shared connection")
	}
	c.do("WATCH", "k").is("+OK\r\n")
	if tr.count(upstream.KindDedicated) != 1 {
		t.Errorf("WATCH asked for %d dedicated connections, want 1", tr.count(upstream.KindDedicated))
	}
	c.do("UNWATCH").is("+OK\r\n")
	c.do("BLPOP", "list", "0.01").is("*-1\r\n")
	if tr.count(upstream.KindBlocking) != 1 {
		t.Errorf("BLPOP asked for %d blocking connections, want 1", tr.count(upstream.KindBlocking))
	}
	s := h.dial()
	s.do("SUBSCRIBE", "ch").hasPrefix("*3\r\n$9\r\nsubscribe\r\n")
	if tr.count(upstream.KindOwn) != 1 {
		t.Errorf("SUBSCRIBE asked for %d connections of its own, want 1", tr.count(upstream.KindOwn))
	}

	tr.mu.Lock()
	tr.down[upstream.KindShared], tr.down[upstream.KindAwaitShared] = true, true
	tr.mu.Unlock()
	c.do("GET", "k").hasPrefix("-UPSTREAM node unavailable: ")
	if got := nodeDo(t, n, "GET", "k"); got != "$1\r\nv\r\n" {
		t.Errorf("GET k on the node: %q", got)
	}
}

// TestTransportGivesTheOtherPathsTheirConnections: the paths beside the
// session's own also ask Options.Transport: a bridged RESP3 client's leg
// to a second upstream, a RESP2 tracking client's REDIRECT relay, and
// CLIENT UNBLOCK's shared connection.
func TestTransportGivesTheOtherPathsTheirConnections(t *testing.T) {
	tr := &kindsTransport{asked: map[upstream.Kind]int{}, down: map[upstream.Kind]bool{}}
	r := startRoutedOn(t, "", func(o *Options) {
		o.Transport = tr
		o.Policy.Allow = map[string]bool{"CLIENT": true} // CLIENT UNBLOCK
	})

	c := r.dial()
	c.do("HELLO", "3").hasPrefix("%")
	c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n") // bridged, its first connection to module-a
	own := tr.count(upstream.KindOwn)
	c.do("GET", "emq:{billing1}:k").is("_\r\n") // a leg to scripts-b
	if got := tr.count(upstream.KindOwn); got != own+1 {
		t.Errorf("a bridged GET on a second upstream asked for %d connections of its own, want 1", got-own)
	}

	inv := r.dial()
	id := strings.TrimSuffix(strings.TrimPrefix(string(inv.do("CLIENT", "ID").got), ":"), "\r\n")
	inv.do("SUBSCRIBE", "__redis__:invalidate").hasPrefix("*3\r\n")
	trk := r.dial()
	own = tr.count(upstream.KindOwn)
	trk.do("CLIENT", "TRACKING", "on", "REDIRECT", id).is("+OK\r\n")
	if got := tr.count(upstream.KindOwn); got <= own {
		t.Error("CLIENT TRACKING REDIRECT asked for no connection of its own for its relay")
	}

	b := r.dial()
	bid := strings.TrimSuffix(strings.TrimPrefix(string(b.do("CLIENT", "ID").got), ":"), "\r\n")
	b.send(cmd("BLPOP", "emq:{q}:list", "0"))
	u := r.dial()
	shared := tr.count(upstream.KindShared)
	poll(t, "CLIENT UNBLOCK unblocks the client", func() bool {
		return string(u.do("CLIENT", "UNBLOCK", bid).got) == ":1\r\n"
	})
	b.read().is("*-1\r\n")
	if tr.count(upstream.KindShared) <= shared {
		t.Error("CLIENT UNBLOCK asked for no shared connection")
	}
}
