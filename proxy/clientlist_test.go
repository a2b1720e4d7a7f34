package proxy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/stand/node"
)

// listLines parses a CLIENT LIST reply (bulk or verbatim) into one field
// map per line, and the field names of the first line in order.
func listLines(t *testing.T, r []byte) (lines []map[string]string, names []string) {
	t.Helper()
	s := string(r)
	head, body, ok := strings.Cut(s, "\r\n")
	if !ok || (head[0] != '$' && head[0] != '=') {
		t.Fatalf("CLIENT LIST reply %q", r)
	}
	body = strings.TrimSuffix(body, "\r\n")
	if head[0] == '=' {
		body = strings.TrimPrefix(body, "txt:")
	}
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if line == "" {
			continue
		}
		m := map[string]string{}
		var order []string
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
			order = append(order, k)
		}
		if names == nil {
			names = order
		}
		lines = append(lines, m)
	}
	return lines, names
}

// listScenario opens, on addr, clients in every state CLIENT LIST tells
// apart, each named, and returns the lister, the clients by name and
// their ids.
func listScenario(t *testing.T, addr string) (lister *client, byName map[string]*client, ids map[string]string) {
	byName, ids = map[string]*client{}, map[string]string{}
	open := func(name string, cmds ...[]string) *client {
		c := dial(t, addr)
		c.do("CLIENT", "SETNAME", name).is("+OK\r\n")
		ids[name] = strings.Trim(string(c.do("CLIENT", "ID").got), ":\r\n")
		for _, st := range cmds {
			c.do(st...)
		}
		byName[name] = c
		return c
	}
	open("alpha", cmd("SET", "k", "v"))
	open("beta", cmd("HELLO", "3"), cmd("MULTI"), cmd("SET", "x", "1"), cmd("INCR", "y"))
	open("gamma", cmd("SUBSCRIBE", "a"), cmd("SUBSCRIBE", "b"), cmd("PSUBSCRIBE", "p*"))
	open("delta", cmd("HELLO", "3"), cmd("SSUBSCRIBE", "{s}1"))
	eps := open("eps")
	eps.send(cmd("BLPOP", "nothing", "0"))
	lister = open("lister")
	poll(t, "eps to block", func() bool {
		return strings.Contains(string(lister.do("CLIENT", "LIST").got), "name=eps age=")
	})
	return lister, byName, ids
}

// TestClientListMatchesTheServer: CLIENT LIST through the proxy lists the
// proxy's clients (never its upstream connections), each as the server
// lists the same client directly: name, flags, db, subscription counts,
// multi, cmd, user and resp alike, the fields in the server's order;
// TYPE and ID select alike, and the errors are the server's.
func TestClientListMatchesTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, nil)
		dl, dc, _ := listScenario(t, direct.Addr)
		pl, pc, pids := listScenario(t, h.addr)
		poll(t, "eps to block on the proxy", func() bool {
			return strings.Contains(string(pl.do("CLIENT", "LIST").got), "name=eps age=0 idle=0 flags=b")
		})
		want, wantNames := listLines(t, dl.do("CLIENT", "LIST").got)
		got, gotNames := listLines(t, pl.do("CLIENT", "LIST").got)
		if srv.Kind == "redis" && !slices.Equal(wantNames, gotNames) {
			t.Errorf("fields:\n direct %q\n proxy  %q", wantNames, gotNames)
		}
		for i, j := 0, 0; i < len(gotNames); i++ { // Valkey adds fields: ours in its order
			for j < len(wantNames) && wantNames[j] != gotNames[i] {
				j++
			}
			if j == len(wantNames) {
				t.Errorf("field %q is not among the server's, in its order: %q", gotNames[i], wantNames)
			}
		}
		if len(want) != len(got) {
			t.Fatalf("direct lists %d clients, the proxy %d:\n%v\n%v", len(want), len(got), want, got)
		}
		// The server lists in the order its cron leaves its client list
		// (rotated), the proxy in id order: compare by name.
		byName := func(ls []map[string]string) []map[string]string {
			return slices.SortedFunc(slices.Values(ls), func(a, b map[string]string) int { return strings.Compare(a["name"], b["name"]) })
		}
		want, got = byName(want), byName(got)
		for i := range want {
			for _, f := range []string{"name", "flags", "db", "sub", "psub", "ssub", "multi", "cmd", "user", "resp", "redir", "events"} {
				if want[i][f] != got[i][f] {
					t.Errorf("client %s: %s=%s directly, %s through the proxy", want[i]["name"], f, want[i][f], got[i][f])
				}
			}
			c, id := pc[got[i]["name"]], pids[got[i]["name"]]
			wantAddr, wantLaddr := c.nc.LocalAddr().String(), h.addr
			if p, ok := strings.CutPrefix(h.addr, netaddr.UnixPrefix); ok {
				wantAddr, wantLaddr = p+":0", p+":0" // a Unix socket's clients, as the server shows its own
			}
			if got[i]["id"] != id || got[i]["addr"] != wantAddr || got[i]["laddr"] != wantLaddr {
				t.Errorf("client %s: id=%s addr=%s laddr=%s, want %s %s %s", got[i]["name"], got[i]["id"], got[i]["addr"],
					got[i]["laddr"], id, wantAddr, wantLaddr)
			}
		}
		// TYPE, ID and the errors.
		ids := func(lister *client, args ...string) string {
			r := lister.do(append([]string{"CLIENT", "LIST"}, args...)...).got
			if r[0] == '-' {
				return string(r)
			}
			lines, _ := listLines(t, r)
			var names []string
			for _, l := range lines {
				names = append(names, l["name"])
			}
			if args[0] == "TYPE" {
				slices.Sort(names) // the server's order is its cron's; ID lists in the ids' order
			}
			return strings.Join(names, ",")
		}
		idOf := func(lister *client, name string) string {
			lines, _ := listLines(t, lister.do("CLIENT", "LIST").got)
			for _, l := range lines {
				if l["name"] == name {
					return l["id"]
				}
			}
			return "none"
		}
		for _, args := range [][]string{
			{"TYPE", "normal"}, {"TYPE", "PUBSUB"}, {"TYPE", "master"}, {"TYPE", "replica"}, {"TYPE", "slave"},
			{"TYPE", "foo"}, {"TYPE"}, {"ID"}, {"ID", "x"}, {"FOO"}, {"TYPE", "normal", "ID", "1"},
			{"ID", "@beta", "@alpha", "@beta", "999999", "0", "-1"}, {"ID", "@gamma", "TYPE", "normal"},
		} {
			resolve := func(lister *client) []string {
				out := slices.Clone(args)
				for i, a := range out {
					if strings.HasPrefix(a, "@") {
						out[i] = idOf(lister, a[1:])
					}
				}
				return out
			}
			w, g := ids(dl, resolve(dl)...), ids(pl, resolve(pl)...)
			if w != g {
				t.Errorf("CLIENT LIST %q: directly %q, through the proxy %q", args, w, g)
			}
		}
		// RESP3: a verbatim string; RESP2 and RESP3 alike empty.
		for _, c := range []*client{dc["beta"], pc["beta"]} {
			c.do("DISCARD")
		}
		for _, args := range [][]string{{"ID", "999999"}, {"TYPE", "master"}} {
			w := string(dc["beta"].do(append([]string{"CLIENT", "LIST"}, args...)...).got)
			g := string(pc["beta"].do(append([]string{"CLIENT", "LIST"}, args...)...).got)
			if w != g || w != "=4\r\ntxt:\r\n" {
				t.Errorf("RESP3 CLIENT LIST %q: directly %q, through the proxy %q", args, w, g)
			}
		}
		if r := string(pc["beta"].do("CLIENT", "LIST").got); !strings.HasPrefix(r, "=") || !strings.Contains(r, "\r\ntxt:id=") {
			t.Errorf("RESP3 CLIENT LIST: %q", r)
		}
		// The node itself lists the proxy's upstream connections, none of
		// which the proxy's list shows. A connection is its two ends: the
		// kernel may give a client's connection to the proxy the same
		// local port as one of the proxy's to the node (another peer).
		upstream, _ := listLines(t, dial(t, behind.Addr).do("CLIENT", "LIST").got)
		for _, u := range upstream {
			for _, l := range got {
				if l["addr"] == u["addr"] && l["laddr"] == u["laddr"] {
					t.Errorf("an upstream connection is listed: %v", l)
				}
			}
		}
	})
}

// TestClientListShowsNamesAndLeavers: two clients see each other by name as
// soon as each has its +OK, and a client that leaves is no longer listed;
// CLIENT INFO is the client's own CLIENT LIST line.
func TestClientListShowsNamesAndLeavers(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	a, b := h.dial(), h.dial()
	a.do("CLIENT", "SETNAME", "worker-a").is("+OK\r\n")
	b.do("CLIENT", "SETNAME", "worker-b").is("+OK\r\n")
	for _, c := range []*client{a, b} {
		lines, _ := listLines(t, c.do("CLIENT", "LIST").got)
		var names []string
		for _, l := range lines {
			names = append(names, l["name"])
		}
		if !slices.Equal(names, []string{"worker-a", "worker-b"}) { // in id order
			t.Errorf("listed %q", names)
		}
	}
	info, _ := listLines(t, a.do("CLIENT", "INFO").got)
	self, _ := listLines(t, a.do("CLIENT", "LIST", "ID", strings.Trim(string(a.do("CLIENT", "ID").got), ":\r\n")).got)
	if len(info) != 1 || len(self) != 1 || info[0]["cmd"] != "client|info" || self[0]["cmd"] != "client|list" {
		t.Fatalf("CLIENT INFO %v, CLIENT LIST ID %v", info, self)
	}
	for k, v := range self[0] {
		if k != "cmd" && k != "age" && k != "idle" && k != "qbuf" && k != "qbuf-free" && info[0][k] != v {
			t.Errorf("%s: CLIENT INFO %s, CLIENT LIST %s", k, info[0][k], v)
		}
	}
	if fd, err := strconv.Atoi(info[0]["fd"]); err != nil || fd < 0 {
		t.Errorf("fd=%s", info[0]["fd"])
	}
	_ = b.nc.Close()
	poll(t, "worker-b to leave the list", func() bool {
		return !strings.Contains(string(a.do("CLIENT", "LIST").got), "worker-b")
	})
}
