package proxy

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestClientUnblockAndKillMatchTheServer: with policy.allow opening CLIENT,
// CLIENT UNBLOCK and CLIENT KILL ID name the proxy's sessions (the ids
// CLIENT ID tells), and every step answers as the same server does for its
// own clients: the errors, a blocked client unblocked (TIMEOUT, ERROR; in
// RESP2 and RESP3) and what it then reads, an id not blocked or unknown,
// a client killed (its connection closed, a blocked one's upstream
// connection too), SKIPME. Without policy.allow both stay refused.
func TestClientUnblockAndKillMatchTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, func(o *Options) { o.Policy.Allow = map[string]bool{"CLIENT": true} })

		run := func(addr string) []string {
			var out []string
			note := func(what string, r reply) { out = append(out, what+" "+string(r.got)) }
			b := dial(t, addr)
			for _, args := range [][]string{
				cmd("CLIENT", "UNBLOCK"), cmd("CLIENT", "UNBLOCK", "x"), cmd("CLIENT", "UNBLOCK", "99999"),
				cmd("CLIENT", "UNBLOCK", "99999", "foo"), cmd("CLIENT", "UNBLOCK", "x", "foo"),
				cmd("CLIENT", "UNBLOCK", "x", "error"), cmd("client", "unblock", "1", "error", "extra"),
				cmd("CLIENT", "UNBLOCK", "-1"), cmd("CLIENT", "UNBLOCK", "99999", "TIMEOUT"),
				cmd("CLIENT", "KILL", "ID", "99999"), cmd("CLIENT", "KILL", "ID", "x"), cmd("CLIENT", "KILL", "ID", "0"),
				cmd("CLIENT", "KILL", "ID", "99999", "SKIPME", "maybe"), cmd("CLIENT", "KILL", "ID", "99999", "SKIPME", "no"),
				cmd("CLIENT", "KILL", "ID", "99998", "ID", "99999"),
			} {
				note(strings.Join(args, " "), b.do(args...))
			}
			idOf := func(c *client) string {
				r := string(c.do("CLIENT", "ID").got)
				return strings.TrimSuffix(strings.TrimPrefix(r, ":"), "\r\n")
			}
			self := idOf(b)
			note("unblock self", b.do("CLIENT", "UNBLOCK", self))
			note("kill self", b.do("CLIENT", "KILL", "ID", self))
			note("kill self SKIPME yes", b.do("CLIENT", "KILL", "ID", self, "SKIPME", "yes"))

			// A blocked client, unblocked as timed out and with an error.
			for _, proto := range []string{"2", "3"} {
				a := dial(t, addr)
				a.do("HELLO", proto)
				id := idOf(a)
				note("unblock idle", b.do("CLIENT", "UNBLOCK", id))
				for _, reason := range []string{"TIMEOUT", "ERROR"} {
					a.send(cmd("BLPOP", "nolist", "0"))
					poll(t, "the client blocked", func() bool {
						return strings.Contains(string(b.do("CLIENT", "LIST", "ID", id).got), "flags=b")
					})
					note("unblock "+reason, b.do("CLIENT", "UNBLOCK", id, reason))
					note("blocked reads", a.read())
					note("unblock again", b.do("CLIENT", "UNBLOCK", id, reason))
				}
				note("after", a.do("RPUSH", "l", "x"))
				// A blocked client killed: its connection closes.
				a.send(cmd("BLPOP", "nolist", "0"))
				poll(t, "the client blocked", func() bool {
					return strings.Contains(string(b.do("CLIENT", "LIST", "ID", id).got), "flags=b")
				})
				note("kill blocked", b.do("CLIENT", "KILL", "ID", id))
				a.closed()
				note("kill gone", b.do("CLIENT", "KILL", "ID", id))
				note("list gone", b.do("CLIENT", "LIST", "ID", id))
			}
			note("kill self SKIPME no", b.do("CLIENT", "KILL", "ID", self, "SKIPME", "no"))
			b.closed()
			return out
		}
		want, got := run(direct.Addr), run(h.addr)
		if len(want) != len(got) {
			t.Fatalf("direct %d steps, proxy %d", len(want), len(got))
		}
		for i := range want {
			if want[i] != got[i] {
				t.Errorf("\n direct %q\n proxy  %q", want[i], got[i])
			}
		}
		t.Logf("%s: %q", srv.Name, got)
		// The killed blocked clients' upstream connections are gone.
		poll(t, "no blocked client on the node", func() bool {
			return strings.Contains(nodeDo(t, behind, "INFO", "clients"), "blocked_clients:0\r\n")
		})

		// Closed by default: the rule's admin class, the deny list.
		d := startProxy(t, behind, nil).dial()
		d.do("CLIENT", "UNBLOCK", "1").hasPrefix(ruleRefused("CLIENT UNBLOCK", "admin"))
		d.do("CLIENT", "KILL", "ID", "1").is("-DENIED emqproxy does not forward 'CLIENT KILL'\r\n")
	})
}
