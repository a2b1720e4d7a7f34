package proxy

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// TestScriptLoadQueuedInMultiReachesEveryUpstream: a SCRIPT LOAD queued in
// MULTI runs at EXEC on the transaction's upstream (module-a: it has no
// keys) and, once EXEC's reply shows it ran, on the other upstream too, so
// a later EVALSHA routed there finds the script; a transaction discarded
// (DISCARD) or not run by the server (a WATCH that failed) loads nothing
// anywhere. In normal service (RESP2), pipelined behind EXEC, and on the
// RESP3 bridge.
func TestScriptLoadQueuedInMultiReachesEveryUpstream(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		r := startRoutedOn(t, srv.Path, nil)
		m := testPolicy(t).Map
		sha := scriptSHA(m, "stats")
		body := string(scripts.Body("stats"))
		exists := func(n *node.Node) string { return nodeDo(t, n, "SCRIPT", "EXISTS", sha) }
		flush := func() {
			nodeDo(t, r.module, "SCRIPT", "FLUSH")
			nodeDo(t, r.scripts, "SCRIPT", "FLUSH")
		}
		loaded := "*1\r\n:1\r\n"
		none := "*1\r\n:0\r\n"
		expect := func(what, module, scripts string) {
			t.Helper()
			if got := exists(r.module); got != module {
				t.Errorf("%s: module node SCRIPT EXISTS %q, want %q", what, got, module)
			}
			if got := exists(r.scripts); got != scripts {
				t.Errorf("%s: scripts node SCRIPT EXISTS %q, want %q", what, got, scripts)
			}
		}
		stats := verbLine(m, "stats", "billing") // routed to scripts-b

		for _, resp3 := range []bool{false, true} {
			mode := "RESP2"
			if resp3 {
				mode = "RESP3 bridge"
			}
			open := func() *client {
				c := r.dial()
				if resp3 {
					c.do("HELLO", "3").hasPrefix("%")
					c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n") // the bridge
				}
				return c
			}

			flush()
			c := open()
			c.do("MULTI").is("+OK\r\n")
			c.do("SCRIPT", "LOAD", body).is("+QUEUED\r\n")
			c.do("EXEC").is("*1\r\n$40\r\n" + sha + "\r\n")
			expect(mode+", EXEC", loaded, loaded)
			c.do(stats...).hasPrefix("*6\r\n")

			// Pipelined: the EVALSHA right behind EXEC finds it too.
			flush()
			c = open()
			c.send(cmd("MULTI"), cmd("SCRIPT", "LOAD", body), cmd("EXEC"), stats)
			c.read().is("+OK\r\n")
			c.read().is("+QUEUED\r\n")
			c.read().is("*1\r\n$40\r\n" + sha + "\r\n")
			c.readSkippingPushes().hasPrefix("*6\r\n")
			expect(mode+", pipelined", loaded, loaded)

			flush()
			c = open()
			c.do("MULTI").is("+OK\r\n")
			c.do("SCRIPT", "LOAD", body).is("+QUEUED\r\n")
			c.do("DISCARD").is("+OK\r\n")
			expect(mode+", DISCARD", none, none)
			c.do(stats...).hasPrefix("-NOSCRIPT")

			// The server does not run a transaction whose WATCH failed.
			c = open()
			c.do("WATCH", "wk").is("+OK\r\n")
			nodeDo(t, r.module, "SET", "wk", "changed")
			c.do("MULTI").is("+OK\r\n")
			c.do("SCRIPT", "LOAD", body).is("+QUEUED\r\n")
			if got := string(c.readSkippingPushesAfter([]string{"EXEC"}).got); got != "*-1\r\n" && got != "_\r\n" {
				t.Errorf("%s: EXEC after a failed WATCH: %q", mode, got)
			}
			expect(mode+", failed WATCH", none, none)

			// A transaction with other commands: the load's place in
			// EXEC's array.
			c = open()
			c.do("MULTI").is("+OK\r\n")
			c.do("INCR", "n").is("+QUEUED\r\n")
			c.do("SCRIPT", "LOAD", body).is("+QUEUED\r\n")
			if got := string(c.do("EXEC").got); !strings.HasSuffix(got, "$40\r\n"+sha+"\r\n") {
				t.Errorf("%s: EXEC %q", mode, got)
			}
			expect(mode+", EXEC of two", loaded, loaded)
		}
	})
}
