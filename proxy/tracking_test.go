package proxy

import (
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// trackRun drives RESP2 client-side caching with REDIRECT against addr
// (the server directly, or the proxy) and returns what the clients saw, in
// order: the tracking client's replies, and every message its redirect
// target got (a RESP3 target, resp3Target, gets invalidate pushes). Ids differ between the two (the proxy's sessions' are not
// the server's): the target's id is written X#.
//
// The target is synchronised on events, never on time: after each step the
// tracking client reads the key mark and another client writes it, so the
// target has every invalidation of the step once it has mark's (they come
// from one server, in its order).
func trackRun(t *testing.T, addr string, resp3Target bool) []string {
	x := dial(t, addr) // the redirect target
	if resp3Target {
		x.do("HELLO", "3").hasPrefix("%")
	}
	c := dial(t, addr) // the tracking client
	o := dial(t, addr) // another client
	xid := strings.TrimSuffix(strings.TrimPrefix(string(x.do("CLIENT", "ID").got), ":"), "\r\n")
	var out []string
	note := func(what string, r reply) {
		got := string(r.got)
		if strings.Contains(what, "GETREDIR") || strings.Contains(what, "TRACKINGINFO") || strings.Contains(what, "closed") {
			got = strings.ReplaceAll(got, ":"+xid+"\r\n", ":X#\r\n")
		}
		out = append(out, strings.ReplaceAll(what, "REDIRECT "+xid, "REDIRECT X#")+" -> "+got)
	}
	note("SUBSCRIBE", x.do("SUBSCRIBE", "__redis__:invalidate"))
	note("CLIENT GETREDIR", c.do("CLIENT", "GETREDIR"))
	note("CLIENT TRACKINGINFO", c.do("CLIENT", "TRACKINGINFO"))
	note("REDIRECT to no client", c.do("CLIENT", "TRACKING", "on", "REDIRECT", "999999"))
	note("REDIRECT not a number", c.do("CLIENT", "TRACKING", "on", "REDIRECT", "x#"))
	note("two REDIRECTs", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid, "REDIRECT", xid))
	note("bad option", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid, "NOSUCH"))
	note("CLIENT GETREDIR", c.do("CLIENT", "GETREDIR"))
	optin := false // the tracking client's reads are tracked after CLIENT CACHING yes only
	step := func(what string, tracker, other [][]string) {
		t.Helper()
		for _, a := range tracker {
			note(what+": "+strings.Join(a, " "), c.do(a...))
		}
		for _, a := range other {
			note(what+": other "+strings.Join(a, " "), o.do(a...))
		}
		if optin {
			c.do("CLIENT", "CACHING", "yes")
		}
		c.do("GET", "mark")
		o.do("SET", "mark", "m")
		for {
			r := x.read()
			note(what+": target got", r)
			if strings.Contains(string(r.got), "\r\n$4\r\nmark\r\n") {
				break
			}
		}
	}
	note("tracking on", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid))
	note("CLIENT GETREDIR", c.do("CLIENT", "GETREDIR"))
	note("CLIENT TRACKINGINFO", c.do("CLIENT", "TRACKINGINFO"))
	step("reads", [][]string{cmd("GET", "a"), cmd("MGET", "b", "c"), cmd("HGETALL", "h")},
		[][]string{cmd("SET", "a", "1"), cmd("SET", "b", "2"), cmd("HSET", "h", "f", "v"), cmd("SET", "unread", "1")})
	step("own writes", [][]string{cmd("GET", "a"), cmd("SET", "a", "2"), cmd("GET", "c"), cmd("DEL", "c")}, nil)
	step("pipeline", nil, [][]string{cmd("MSET", "a", "3", "b", "3", "c", "3")})
	step("transaction", [][]string{cmd("MULTI"), cmd("GET", "d"), cmd("EXEC")},
		[][]string{cmd("SET", "d", "1")})
	step("watch", [][]string{cmd("WATCH", "e"), cmd("GET", "e"), cmd("MULTI"), cmd("GET", "f"), cmd("EXEC")},
		[][]string{cmd("SET", "e", "1"), cmd("SET", "f", "1")})
	step("noloop", [][]string{cmd("CLIENT", "TRACKING", "on", "REDIRECT", xid, "NOLOOP"), cmd("GET", "g"), cmd("SET", "g", "1"), cmd("GET", "a")},
		[][]string{cmd("SET", "a", "4")})
	note("tracking off", c.do("CLIENT", "TRACKING", "off"))
	note("CLIENT GETREDIR", c.do("CLIENT", "GETREDIR"))
	note("off: GET a", c.do("GET", "a"))
	note("off: other SET a", o.do("SET", "a", "5"))
	optin = true
	step("optin", [][]string{cmd("CLIENT", "TRACKING", "on", "REDIRECT", xid, "OPTIN"), cmd("GET", "a"),
		cmd("CLIENT", "CACHING", "yes"), cmd("GET", "b"), cmd("GET", "c")},
		[][]string{cmd("SET", "a", "6"), cmd("SET", "b", "6"), cmd("SET", "c", "6")})
	optin = false
	note("switch to optout", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid, "OPTOUT"))
	note("tracking off", c.do("CLIENT", "TRACKING", "off"))
	step("optout", [][]string{cmd("CLIENT", "TRACKING", "on", "REDIRECT", xid, "OPTOUT"), cmd("GET", "a"),
		cmd("CLIENT", "CACHING", "no"), cmd("GET", "b"), cmd("GET", "c")},
		[][]string{cmd("SET", "a", "7"), cmd("SET", "b", "7"), cmd("SET", "c", "7")})
	note("tracking off", c.do("CLIENT", "TRACKING", "off"))
	note("prefix without bcast", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid, "PREFIX", "p:"))
	step("bcast", [][]string{cmd("CLIENT", "TRACKING", "on", "REDIRECT", xid, "BCAST", "PREFIX", "p:", "PREFIX", "mark")},
		[][]string{cmd("SET", "p:1", "1"), cmd("SET", "q:1", "1"), cmd("SET", "a", "8")})
	note("CLIENT TRACKINGINFO", c.do("CLIENT", "TRACKINGINFO"))
	note("tracking off", c.do("CLIENT", "TRACKING", "off"))
	// RESET turns tracking off: what was read before is forgotten.
	note("tracking on", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid))
	note("GET a", c.do("GET", "a"))
	note("RESET", c.do("RESET"))
	note("CLIENT GETREDIR", c.do("CLIENT", "GETREDIR"))
	note("GET b", c.do("GET", "b"))
	note("other SET a", o.do("SET", "a", "9"))
	note("other SET b", o.do("SET", "b", "9"))
	step("after reset", [][]string{cmd("CLIENT", "TRACKING", "on", "REDIRECT", xid)}, nil)
	note("tracking off", c.do("CLIENT", "TRACKING", "off"))

	// The target closes: the tracking client's redirect is broken. Over
	// RESP2 the server sends it nothing; CLIENT TRACKINGINFO says so once
	// an invalidation found the target gone.
	note("tracking on", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid))
	c.do("GET", "a")
	_ = x.nc.Close()
	poll(t, "the target to be gone", func() bool {
		return !strings.Contains(string(o.do("CLIENT", "LIST").got), "id="+xid+" ")
	})
	poll(t, "the redirect to be found broken", func() bool {
		o.do("SET", "a", "10")
		c.do("GET", "a")
		return strings.Contains(string(c.do("CLIENT", "TRACKINGINFO").got), "broken_redirect")
	})
	note("after the target closed", c.do("CLIENT", "TRACKINGINFO"))
	note("CLIENT GETREDIR", c.do("CLIENT", "GETREDIR"))
	note("REDIRECT to the closed target", c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid))
	note("PING", c.do("PING"))
	_ = c.nc.Close()
	_ = o.nc.Close()
	return out
}

// TestRESP2TrackingRedirectMatchesTheServer: a RESP2 client that tracks
// with REDIRECT to another client's connection subscribed to
// __redis__:invalidate gets, through the proxy, what it gets from the same
// server directly: the same replies (errors for a missing or malformed
// redirect id, OPTIN/OPTOUT/BCAST/NOLOOP, OFF, RESET, GETREDIR,
// TRACKINGINFO), the same invalidation messages in the same order at the
// target, for reads and writes of its own and of another client,
// pipelines, transactions and WATCH, and, once the target closes, the
// broken redirect; for a RESP2 target in subscribe mode and a RESP3 one.
func TestRESP2TrackingRedirectMatchesTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, func(o *Options) {
			o.Policy.Deny = map[string]bool{}
		})
		for _, resp3Target := range []bool{false, true} {
			want, got := trackRun(t, direct.Addr, resp3Target), trackRun(t, h.addr, resp3Target)
			compareTrackRuns(t, want, got)
			inv := "__redis__:invalidate\r\n*1\r\n$1\r\na\r\n"
			if resp3Target {
				inv = ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\na\r\n"
			}
			if !strings.Contains(strings.Join(got, "\n"), inv) {
				t.Errorf("no invalidation of a reached the target: %q", got)
			}
		}
		// Nothing of the tracking client is left on the node but the
		// proxy's shared connections once it goes.
		poll(t, "the tracking connections to be given back", func() bool { return h.srv.Upstream().Owned() == 0 })
	})
}

// compareTrackRuns reports where two trackRun transcripts differ.
func compareTrackRuns(t *testing.T, want, got []string) {
	t.Helper()
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("step %d:\n direct %q\n proxy  %q", i, w, g)
		}
	}
}

// TestRESP2TrackingRedirectReachesEveryRoute: a RESP2 client that tracks
// with REDIRECT through a proxy of two upstreams has the keys it read on
// each node tracked there, and each node's invalidations reach the session
// it named; a CLIENT CACHING YES (OPTIN) applies to the next command on
// that command's node; BCAST tracks on every node.
func TestRESP2TrackingRedirectReachesEveryRoute(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		r := startRoutedOn(t, srv.Path, nil) // billing* on scripts-b, the rest on module-a
		x, c, o := r.dial(), r.dial(), r.dial()
		xid := strings.TrimSuffix(strings.TrimPrefix(string(x.do("CLIENT", "ID").got), ":"), "\r\n")
		x.do("SUBSCRIBE", "__redis__:invalidate").hasPrefix("*3\r\n$9\r\nsubscribe\r\n")
		const qk, bk = "emq:{quotes}:k", "emq:{billing}:k"
		const qm, bm = "emq:{quotes}:mark", "emq:{billing}:mark"
		// invalidated reads the target until both marks' invalidations are
		// in (each node's come in its order), and returns the keys.
		invalidated := func() map[string]int {
			o.do("SET", qm, "1").is("+OK\r\n")
			o.do("SET", bm, "1").is("+OK\r\n")
			got := map[string]int{}
			for got[qm] == 0 || got[bm] == 0 {
				m := string(x.read().got)
				if !strings.HasPrefix(m, "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n") {
					t.Fatalf("the target got %q", m)
				}
				for _, k := range []string{qk, bk, qm, bm, "emq:{billing}:c", "emq:{billing}:d", "emq:{quotes}:p", "emq:{billing}:p"} {
					if strings.Contains(m, "$"+strconv.Itoa(len(k))+"\r\n"+k+"\r\n") {
						got[k]++
					}
				}
			}
			return got
		}
		want := func(got map[string]int, keys ...string) {
			t.Helper()
			w := map[string]int{qm: 1, bm: 1}
			for _, k := range keys {
				w[k] = 1
			}
			if !maps.Equal(got, w) {
				t.Errorf("invalidated %v, want %v", got, w)
			}
		}
		c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid).is("+OK\r\n")
		c.send(cmd("GET", qk), cmd("GET", bk), cmd("GET", qm), cmd("GET", bm))
		for range 4 {
			c.read().is("$-1\r\n")
		}
		o.do("SET", qk, "1").is("+OK\r\n")
		o.do("SET", bk, "1").is("+OK\r\n")
		want(invalidated(), qk, bk)

		// OPTIN: CLIENT CACHING yes reaches the node of the read after it.
		c.do("CLIENT", "TRACKING", "off").is("+OK\r\n")
		c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid, "OPTIN").is("+OK\r\n")
		c.send(cmd("CLIENT", "CACHING", "yes"), cmd("GET", "emq:{billing}:c"), cmd("GET", "emq:{billing}:d"),
			cmd("CLIENT", "CACHING", "yes"), cmd("GET", qm), cmd("CLIENT", "CACHING", "yes"), cmd("GET", bm))
		for _, w := range []string{"+OK\r\n", "$-1\r\n", "$-1\r\n", "+OK\r\n", "$1\r\n1\r\n", "+OK\r\n", "$1\r\n1\r\n"} {
			c.read().is(w)
		}
		c.do("CLIENT", "CACHING", "yes").is("+OK\r\n") // alone in its read: the default route's
		c.do("GET", "emq:{billing}:d").is("$-1\r\n")   // not tracked: the flag is on module-a's connection
		o.do("SET", "emq:{billing}:c", "1").is("+OK\r\n")
		o.do("SET", "emq:{billing}:d", "1").is("+OK\r\n")
		want(invalidated(), "emq:{billing}:c")

		// BCAST: every node announces the prefix's changes.
		c.do("CLIENT", "TRACKING", "off").is("+OK\r\n")
		c.do("CLIENT", "TRACKING", "on", "REDIRECT", xid, "BCAST", "PREFIX", "emq:").is("+OK\r\n")
		o.do("SET", "emq:{quotes}:p", "1").is("+OK\r\n")
		o.do("SET", "emq:{billing}:p", "1").is("+OK\r\n")
		want(invalidated(), "emq:{quotes}:p", "emq:{billing}:p")

		// Its tracking lives on RESP2 connections: no switch to RESP3.
		c.do("HELLO", "3").is("-ERR emqproxy: HELLO cannot switch a RESP2 client that tracks (CLIENT TRACKING) to RESP3; CLIENT TRACKING off first\r\n")
		// The relay's connection to scripts-b breaks (the server closes
		// it): the tracking client's invalidations from there would be
		// lost, so it is closed and drops its cache; the target stays.
		nodeDo(t, r.scripts, "CLIENT", "KILL", "TYPE", "pubsub")
		c.closed()
		x.send(cmd("PING"))
		for { // an invalidation may come first: the client's session may not have ended yet
			if m := string(x.read().got); m == "*2\r\n$4\r\npong\r\n$0\r\n\r\n" {
				break
			} else if !strings.HasPrefix(m, "*3\r\n$7\r\nmessage\r\n") {
				t.Fatalf("the target got %q", m)
			}
		}
	})
}
