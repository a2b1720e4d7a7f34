package proxy

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestClientSetInfoMatchesTheServer: CLIENT SETINFO, which client
// libraries send on connect, is answered for the client itself, with the
// server's replies and errors (Redis 7.0 has no such subcommand, Valkey 8
// has), and CLIENT INFO and LIST show lib-name and lib-ver as the same
// server shows them for a client of its own, across RESET and HELLO 3.
func TestClientSetInfoMatchesTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, nil)
		steps := [][]string{
			cmd("CLIENT", "SETINFO", "lib-name", "valkey-go"),
			cmd("CLIENT", "SETINFO", "LIB-VER", "1.0.79"),
			cmd("CLIENT", "INFO"),
			cmd("CLIENT", "SETINFO", "Lib-Name", "two words"),
			cmd("CLIENT", "SETINFO", "lib-ver", "caf\xc3\xa9"),
			cmd("CLIENT", "SETINFO", "lib-nom", "x"),
			cmd("CLIENT", "SETINFO", "lib-name"),
			cmd("CLIENT", "SETINFO", "lib-name", "a", "b"),
			cmd("CLIENT", "SETINFO", "lib-ver", ""),
			cmd("CLIENT", "LIST"),
			cmd("RESET"),
			cmd("CLIENT", "INFO"),
			cmd("HELLO", "3"),
			cmd("CLIENT", "SETINFO", "lib-name", "go-redis(,go1.26)"),
			cmd("CLIENT", "INFO"),
		}
		run := func(addr string) []string {
			c := dial(t, addr)
			var out []string
			for _, s := range steps {
				r := string(c.do(s...).got)
				if s[0] == "CLIENT" && (s[1] == "INFO" || s[1] == "LIST") {
					r = libFields(t, r)
				}
				if s[0] == "HELLO" {
					r = r[:1]
				}
				out = append(out, r)
			}
			return out
		}
		want, got := run(direct.Addr), run(h.addr)
		for i := range want {
			if want[i] != got[i] {
				t.Errorf("%q:\n direct %q\n proxy  %q", steps[i], want[i], got[i])
			}
		}
		t.Logf("%s: %q", srv.Name, got)
		// Another client lists the client's library, as the server does.
		c := h.dial()
		c.do("CLIENT", "SETNAME", "lister").is("+OK\r\n")
		w, g := dial(t, direct.Addr), h.dial()
		for _, x := range []*client{w, g} {
			x.do("CLIENT", "SETINFO", "lib-name", "redis-py")
		}
		list := string(c.do("CLIENT", "LIST").got)
		if strings.Contains(string(dial(t, direct.Addr).do("CLIENT", "LIST").got), "lib-name=redis-py") !=
			strings.Contains(list, "lib-name=redis-py") {
			t.Errorf("another client's CLIENT LIST through the proxy:\n%s", list)
		}
		// The node's own list shows no library name on the proxy's upstream
		// connections: nothing reached the shared connection.
		if up := string(dial(t, behind.Addr).do("CLIENT", "LIST").got); strings.Contains(up, "lib-name=redis-py") ||
			strings.Contains(up, "lib-name=valkey-go") {
			t.Errorf("a library name reached the upstream:\n%s", up)
		}
	})
}

// libFields is a CLIENT INFO or LIST reply's lib-name and lib-ver fields
// (each line's), or the reply itself when it is an error.
func libFields(t *testing.T, r string) string {
	t.Helper()
	if r[0] == '-' {
		return r
	}
	lines, _ := listLines(t, []byte(r))
	var out []string
	for _, l := range lines {
		name, hasName := l["lib-name"]
		ver, hasVer := l["lib-ver"]
		out = append(out, strings.Join([]string{
			map[bool]string{true: "lib-name=" + name, false: "no lib-name"}[hasName],
			map[bool]string{true: "lib-ver=" + ver, false: "no lib-ver"}[hasVer],
		}, " "))
	}
	return r[:1] + strings.Join(out, "; ")
}

// TestACLWhoamiIsTheClientsUser: ACL WHOAMI names the user the client
// authenticated as (default otherwise), as the server answers a client of
// its own, not the user the proxy connects upstream as (app).
func TestACLWhoamiIsTheClientsUser(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		acl := []string{"alice on >pw-alice ~* &* +@all", "app on >app-pw ~* &* +@all"}
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path, ACL: acl})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path, ACL: acl})
		asApp := func(o *Options) { o.Upstream.Username, o.Upstream.Password = "app", "app-pw" }
		open := startProxy(t, behind, asApp)
		withUsers := startProxy(t, behind, func(o *Options) {
			asApp(o)
			o.Policy.Users = map[string]string{"alice": "pw-alice"}
		})
		compare := func(addr string, steps [][]string) {
			t.Helper()
			run := func(addr string) []string {
				c := dial(t, addr)
				var out []string
				for _, s := range steps {
					r := string(c.do(s...).got)
					if s[0] == "HELLO" {
						r = r[:1]
					}
					out = append(out, r)
				}
				return out
			}
			want, got := run(direct.Addr), run(addr)
			for i := range want {
				if want[i] != got[i] {
					t.Errorf("%q:\n direct %q\n proxy  %q", steps[i], want[i], got[i])
				}
			}
		}
		compare(open.addr, [][]string{
			cmd("ACL", "WHOAMI"), cmd("ACL", "WHOAMI", "x"), cmd("acl", "whoami"),
			cmd("HELLO", "3"), cmd("ACL", "WHOAMI"), cmd("RESET"), cmd("ACL", "WHOAMI"),
		})
		compare(withUsers.addr, [][]string{
			cmd("AUTH", "alice", "pw-alice"), cmd("ACL", "WHOAMI"),
			cmd("HELLO", "3"), cmd("ACL", "WHOAMI"),
			cmd("HELLO", "2", "AUTH", "alice", "pw-alice"), cmd("ACL", "WHOAMI"),
		})
	})
}
