package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// routed is a proxy in front of a module node ("module-a", queues but
// billing*) and a scripts node ("scripts-b", billing*), each behind its
// role's fence, with an observed audit log.
type routed struct {
	*harness
	module, scripts *node.Node
	audit           *syncBuffer
}

// startRouted starts both nodes and the proxy.
func startRouted(t *testing.T) *routed { return startRoutedWith(t, nil) }

// startRoutedWith is startRouted with mod applied to the proxy's options.
func startRoutedWith(t *testing.T, mod func(*Options)) *routed { return startRoutedOn(t, "", mod) }

// startRoutedOn is startRoutedWith with both nodes run by the server binary
// server ("" for Debian's redis-server).
func startRoutedOn(t *testing.T, server string, mod func(*Options)) *routed {
	t.Helper()
	pol := testPolicy(t)
	mn := node.StartT(t, node.Options{Role: node.Module, Server: server})
	scr := node.StartT(t, node.Options{Role: node.Scripts, Brand: pol.Map.LegacyBrand, Server: server})
	logs := &syncBuffer{}
	opts := Options{
		Policy:    pol,
		Upstreams: billingUpstreams(pol, mn, scr),
		Routes:    billingRoutes,
	}
	if mod != nil {
		mod(&opts)
	}
	srv, addr := serveProxy(t, opts, zap.NewNop(), jsonAudit(logs))
	h := &harness{t: t, node: mn, srv: srv, addr: addr}
	h.waitReady()
	return &routed{harness: h, module: mn, scripts: scr, audit: logs}
}

// verbLine builds an EVALSHA of a pinned script with its pinned shape,
// its keys under the given queues in turn.
func verbLine(m *shamap.Map, name string, queues ...string) []string {
	var s *shamap.Script
	for i := range m.Scripts {
		if m.Scripts[i].Name == name {
			s = m.Scripts[i]
		}
	}
	line := []string{"EVALSHA", s.SHA, strconv.Itoa(s.Keys)}
	for i := range s.Keys {
		role := "k" + strconv.Itoa(i)
		if name == "pause" || name == "resume" {
			role = "paused"
		}
		line = append(line, "emq:{"+queues[i%len(queues)]+"}:"+role)
	}
	for i := range s.Values {
		line = append(line, "v"+strconv.Itoa(i))
	}
	return line
}

// raw sends one command straight to a node.
func nodeDo(t *testing.T, n *node.Node, args ...string) string {
	t.Helper()
	b, err := node.RawDo(n.Addr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRoutesSendEachQueueToItsUpstream(t *testing.T) {
	r := startRouted(t)
	c := r.dial()
	c.do("SET", "emq:{billing}:a", "1").is("+OK\r\n")
	c.do("SET", "emq:{quotes}:a", "2").is("+OK\r\n")
	c.do("SET", "plain", "3").is("+OK\r\n") // no hashtag: the default route
	c.do("GET", "emq:{billing}:a").is("$1\r\n1\r\n")
	if got := nodeDo(t, r.scripts, "GET", "emq:{billing}:a"); got != "$1\r\n1\r\n" {
		t.Errorf("scripts node: %q", got)
	}
	for _, k := range []string{"emq:{quotes}:a", "plain"} {
		if got := nodeDo(t, r.scripts, "EXISTS", k); got != ":0\r\n" {
			t.Errorf("scripts node has %s", k)
		}
		if got := nodeDo(t, r.module, "EXISTS", k); got != ":1\r\n" {
			t.Errorf("module node lacks %s", k)
		}
	}
	if got := nodeDo(t, r.module, "EXISTS", "emq:{billing}:a"); got != ":0\r\n" {
		t.Error("module node has the billing key")
	}
	// Movable keys (XREAD's STREAMS) and keys after a count (ZUNIONSTORE).
	c.do("XADD", "emq:{billing}:s", "1-1", "f", "v").is("$3\r\n1-1\r\n")
	c.do("XREAD", "COUNT", "1", "STREAMS", "emq:{billing}:s", "0").hasPrefix("*1\r\n")
	c.do("ZADD", "emq:{billing}:z", "1", "m").is(":1\r\n")
	c.do("ZUNIONSTORE", "emq:{billing}:u", "1", "emq:{billing}:z").is(":1\r\n")
	// SORT's keys are asked of the server (COMMAND GETKEYS).
	c.do("RPUSH", "emq:{billing}:l", "2", "1").is(":2\r\n")
	c.do("SORT", "emq:{billing}:l", "STORE", "emq:{billing}:sorted").is(":2\r\n")
	if got := nodeDo(t, r.scripts, "LRANGE", "emq:{billing}:sorted", "0", "-1"); got != "*2\r\n$1\r\n1\r\n$1\r\n2\r\n" {
		t.Errorf("sorted on the scripts node: %q", got)
	}
}

func TestCrossRouteIsRefusedWithNothingSent(t *testing.T) {
	r := startRouted(t)
	c := r.dial()
	before := map[*node.Node]map[string]int64{r.module: nodeStats(t, r.module), r.scripts: nodeStats(t, r.scripts)}
	c.do("MSET", "emq:{billing}:x", "1", "emq:{quotes}:x", "2").is(
		"-CROSSROUTE the keys of 'MSET' route to upstreams scripts-b and module-a; emqproxy does not split one command across upstreams\r\n")
	c.do("SORT", "emq:{billing}:l", "STORE", "emq:{quotes}:l").hasPrefix("-CROSSROUTE the keys of 'SORT' route to upstreams scripts-b and module-a")

	// A transaction: refused at the second queue's command, EXEC aborts.
	c.do("MULTI").is("+OK\r\n")
	c.do("SET", "emq:{quotes}:m", "1").is("+QUEUED\r\n")
	c.do("SET", "emq:{billing}:m", "1").is(
		"-CROSSROUTE 'SET' routes to upstream scripts-b but the transaction's earlier commands route to module-a; emqproxy does not split a transaction across upstreams\r\n")
	c.do("EXEC").is("-EXECABORT Transaction discarded because of previous errors.\r\n")

	// A script call whose keys span queues on different upstreams.
	m := testPolicy(t).Map
	c.do(verbLine(m, "enqueue", "quotes", "billing")...).hasPrefix("-CROSSROUTE the keys of 'EVALSHA' route to upstreams module-a and scripts-b")

	// WATCH pins the connection to one upstream.
	c.do("WATCH", "emq:{billing}:w").is("+OK\r\n")
	c.do("GET", "emq:{quotes}:w").hasPrefix("-CROSSROUTE 'GET' routes to upstream module-a but WATCH pinned the connection to scripts-b")
	c.do("UNWATCH").is("+OK\r\n")
	c.do("GET", "emq:{quotes}:w").is("$-1\r\n")

	for _, n := range []*node.Node{r.module, r.scripts} {
		if got := nodeDo(t, n, "DBSIZE"); got != ":1\r\n" { // the brand only
			t.Errorf("node %s holds %s keys after refusals", n.Addr, got)
		}
		st := nodeStats(t, n)
		for _, name := range []string{"mset", "set", "exec", "multi", "evalsha", "sort", "emq.enqueue"} {
			if st[name] != before[n][name] {
				t.Errorf("node %s ran %s %d times", n.Addr, name, st[name]-before[n][name])
			}
		}
	}
}

func TestPipelineSpanningUpstreamsIsSplitInOrder(t *testing.T) {
	r := startRouted(t)
	c := r.dial()
	var cmds [][]string
	for i := range 50 {
		q := "quotes"
		if i%3 == 0 {
			q = "billing"
		}
		cmds = append(cmds, cmd("RPUSH", "emq:{"+q+"}:p", strconv.Itoa(i)))
	}
	c.send(cmds...)
	nb, nq := 0, 0
	for i := range 50 {
		var n int
		if i%3 == 0 {
			nb++
			n = nb
		} else {
			nq++
			n = nq
		}
		c.read().is(":" + strconv.Itoa(n) + "\r\n")
	}
	if got := nodeDo(t, r.scripts, "LLEN", "emq:{billing}:p"); got != ":"+strconv.Itoa(nb)+"\r\n" {
		t.Errorf("scripts node list: %q", got)
	}
	if got := nodeDo(t, r.module, "LLEN", "emq:{quotes}:p"); got != ":"+strconv.Itoa(nq)+"\r\n" {
		t.Errorf("module node list: %q", got)
	}
	// Interleaved reads, keyless commands and local replies in one pipeline.
	c.send(cmd("LINDEX", "emq:{billing}:p", "0"), cmd("PING"), cmd("LINDEX", "emq:{quotes}:p", "0"),
		cmd("DBSIZE"), cmd("LINDEX", "emq:{billing}:p", "-1"), cmd("ECHO", "x"))
	c.read().is("$1\r\n0\r\n")
	c.read().is("+PONG\r\n")
	c.read().is("$1\r\n1\r\n")
	c.read().hasPrefix(":") // the default route's (module-a)
	c.read().is("$2\r\n48\r\n")
	c.read().is("$1\r\nx\r\n")
}

func TestVerbCallsPassOnScriptsAndAreRewrittenOnModule(t *testing.T) {
	r := startRouted(t)
	m := testPolicy(t).Map
	c := r.dial()
	c.send(verbLine(m, "pause", "billing"), verbLine(m, "pause", "quotes"))
	c.read().hasPrefix("-NOSCRIPT") // the scripts node's cold cache: the client reloads
	c.read().is(":1\r\n")

	// SCRIPT LOAD of a verb body is answered by the proxy; a read body goes
	// to every upstream.
	c.do("SCRIPT", "LOAD", string(scripts.Body("stats"))).is("$40\r\n" + scriptSHA(m, "stats") + "\r\n")
	for _, n := range []*node.Node{r.module, r.scripts} {
		if got := nodeDo(t, n, "SCRIPT", "EXISTS", scriptSHA(m, "stats")); got != "*1\r\n:1\r\n" {
			t.Errorf("node %s: SCRIPT EXISTS stats = %q", n.Addr, got)
		}
	}
	if got := nodeDo(t, r.scripts, "SCRIPT", "LOAD", string(scripts.Body("pause"))); !strings.Contains(got, scriptSHA(m, "pause")) {
		t.Fatalf("load pause on the scripts node: %q", got)
	}
	c.do(verbLine(m, "pause", "billing")...).is(":1\r\n")
	if st := nodeStats(t, r.scripts); st["evalsha"] != 2 {
		t.Errorf("scripts node ran evalsha %d times, want 2", st["evalsha"])
	}
	st := nodeStats(t, r.module)
	if st["emq.pause"] != 1 || st["evalsha"] != 0 || st["eval"] != 0 {
		t.Errorf("module node: emq.pause %d, evalsha %d, eval %d", st["emq.pause"], st["evalsha"], st["eval"])
	}
	// A round's audit records are written after its replies: wait for the
	// last call's.
	var rewrites, passes []string
	poll(t, "the pause calls' audit records", func() bool {
		rewrites, passes = nil, nil
		for _, f := range r.audit.records(t) {
			if f["script"] != "pause" {
				continue
			}
			switch f["msg"] {
			case "rewrite":
				rewrites = append(rewrites, f["upstream"].(string))
			case "pass":
				passes = append(passes, f["upstream"].(string))
			}
		}
		return len(rewrites)+len(passes) >= 3
	})
	if strings.Join(rewrites, ",") != "module-a" || strings.Join(passes, ",") != "scripts-b,scripts-b" {
		t.Errorf("audit: rewrites to %v, passes to %v", rewrites, passes)
	}

	// Move billing to the module node: the same call is rewritten there.
	if err := r.srv.SwapRoutes([]Route{{Queues: []string{"*"}, Upstream: "module-a"}}); err != nil {
		t.Fatal(err)
	}
	c.do(verbLine(m, "pause", "billing")...).is(":1\r\n") // billing's data stayed on the scripts node
	if st := nodeStats(t, r.module); st["emq.pause"] != 2 {
		t.Errorf("module node ran emq.pause %d times, want 2 (quotes, then billing after the swap)", st["emq.pause"])
	}
	if st := nodeStats(t, r.scripts); st["evalsha"] != 2 {
		t.Errorf("scripts node ran evalsha %d times after the swap, want still 2", st["evalsha"])
	}
	if r.srv.RouteFor("billing") != "module-a" {
		t.Errorf("billing routes to %s", r.srv.RouteFor("billing"))
	}
}

func TestSwapRoutesRefusesBadRoutes(t *testing.T) {
	r := startRouted(t)
	for _, rs := range [][]Route{
		nil,
		{{Queues: []string{"*"}, Upstream: "module-c"}},
		{{Queues: []string{"billing"}, Upstream: "scripts-b"}},
		{{Queues: []string{"[x"}, Upstream: "scripts-b"}, {Queues: []string{"*"}, Upstream: "module-a"}},
	} {
		if err := r.srv.SwapRoutes(rs); !errors.Is(err, ErrRoutes) {
			t.Errorf("%v: %v", rs, err)
		}
	}
	if r.srv.RouteFor("billing") != "scripts-b" || r.srv.RouteFor("billing-eu") != "scripts-b" || r.srv.RouteFor("quotes") != "module-a" {
		t.Errorf("routes changed by refused swaps: %v", r.srv.Routes())
	}
}

func TestReadinessNeedsEveryUpstream(t *testing.T) {
	r := startRouted(t)
	c := r.dial()
	c.do("GET", "{emq}:version").is("$12\r\necho" + "mq:4.0.0\r\n")
	if err := r.scripts.Stop(); err != nil {
		t.Fatal(err)
	}
	poll(t, "readiness to name scripts-b", func() bool {
		err := r.srv.Readiness()
		return err != nil && strings.Contains(err.Error(), "scripts-b")
	})
	// The client-side fence answer holds only while every upstream's holds.
	c.do("GET", "{emq}:version").hasPrefix("-FENCE")
	c.do("SET", "emq:{quotes}:still", "1").is("+OK\r\n")
	c.do("SET", "emq:{billing}:down", "1").hasPrefix("-UPSTREAM scripts-b unavailable")
}

// scriptSHA returns a pinned script's sha.
func scriptSHA(m *shamap.Map, name string) string {
	for _, s := range m.Scripts {
		if s.Name == name {
			return s.SHA
		}
	}
	return ""
}

// billingUpstreams are a module node (module-a) and a scripts node
// (scripts-b), each fenced as the binary fences them, without install.
func billingUpstreams(pol *rewrite.Policy, mn, scr *node.Node) []UpstreamOptions {
	return []UpstreamOptions{
		{Name: "module-a", Address: mn.Addr, Role: RoleModule, OnConnect: func(ctx context.Context, c fence.Conn) error {
			_, err := fence.CheckModule(ctx, c, pol.Map, false)
			return err
		}},
		{Name: "scripts-b", Address: scr.Addr, Role: RoleScripts, OnConnect: func(ctx context.Context, c fence.Conn) error {
			_, err := fence.CheckScripts(ctx, c, pol.Map.LegacyBrand, false)
			return err
		}},
	}
}

// billingRoutes send the billing queues to scripts-b, the rest to module-a.
var billingRoutes = []Route{{Queues: []string{"billing*"}, Upstream: "scripts-b"}, {Queues: []string{"*"}, Upstream: "module-a"}}
