package proxy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// step is one command of the fidelity corpus: sent as direct to one node
// and as proxied (the same unless set) through the proxy to an identical
// node; the reply bytes must be identical.
type step struct {
	direct  []string
	proxied []string
	// pipelined steps are sent together with the following pipelined steps.
	pipelined bool
	// clock marks replies that carry the time (lease deadlines, epochs):
	// compared with digits and hex masked, so only their shape must match.
	clock bool
}

// clocked marks a step's reply as time-dependent.
func clocked(s step) step { s.clock = true; return s }

// maskClock replaces every run of hex digits with '#', keeping the shape.
func maskClock(b []byte) string {
	var out []byte
	for i := 0; i < len(b); i++ {
		c := b[i]
		if (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') {
			if len(out) == 0 || out[len(out)-1] != '#' {
				out = append(out, '#')
			}
			continue
		}
		out = append(out, c)
	}
	return string(out)
}

func same(args ...string) step { return step{direct: args} }

// script returns a step calling a pinned verb script: EMQ.<token> directly,
// EVALSHA <sha> through the proxy.
func script(t testing.TB, h *harness, name string, args ...string) step {
	t.Helper()
	s, ok := h.srv.Policy().Map.ByName(name)
	if !ok {
		t.Fatalf("no script %q in the map", name)
	}
	return step{
		direct:  append([]string{s.Command}, args...),
		proxied: append([]string{"EVALSHA", s.SHA}, args...),
	}
}

func fidelityCorpus(t testing.TB, h *harness) []step {
	mib := strings.Repeat("fidelity", 1<<17) // 1 MiB
	bin := "\x00\r\n\xff\x7f$*-+:\r\n"
	q := func(role string) string { return "emq:{fq}:" + role }
	peek, _ := h.srv.Policy().Map.ByName("peek")
	steps := []step{
		same("EMQ.VERSION"), // wire-6 from here on, on both sides
		same("GET", "{emq}:version"),
		same("SET", "s", "v"), same("GET", "s"), same("GET", "missing"),
		same("SET", "n", "10"), same("INCR", "n"), same("INCRBY", "n", "-5"), same("DECR", "n"),
		same("INCRBYFLOAT", "n", "1.5"), same("INCR", "s"), same("LPUSH", "s", "x"),
		same("LPUSH", "l", "a", "b", "c"), same("LRANGE", "l", "0", "-1"), same("LPOP", "missing", "2"),
		same("LPOP", "l", "2"), same("LPOP", "l", "0"), same("RPOP", "l"), same("RPOP", "l"),
		same("LINDEX", "l", "5"), same("LSET", "nolist", "0", "x"), same("RPUSH", "l2", "1", "2", "3"),
		same("LSET", "l2", "9", "x"), same("LINSERT", "l2", "BEFORE", "2", "1.5"), same("LPOS", "l2", "3"),
		same("HSET", "h", "f1", "v1", "f2", "v2"), same("HGETALL", "h"), same("HGET", "h", "nope"),
		same("HMGET", "h", "f1", "nope", "f2"), same("HINCRBYFLOAT", "h", "n", "0.25"), same("HSTRLEN", "h", "f1"),
		same("ZADD", "z", "1", "a", "2", "b", "3", "c"), same("ZRANGE", "z", "0", "-1", "WITHSCORES"),
		same("ZSCORE", "z", "a"), same("ZSCORE", "z", "nope"), same("ZRANK", "z", "b"), same("ZINCRBY", "z", "0.5", "a"),
		same("ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "1"), same("ZPOPMIN", "z"),
		same("ZMPOP", "1", "z", "MIN", "COUNT", "1"), same("ZMPOP", "1", "nozset", "MIN"),
		same("SADD", "set", "1", "2", "3"), same("SISMEMBER", "set", "2"), same("SCARD", "set"),
		same("SMEMBERS", "set"), same("SINTERCARD", "1", "set"),
		same("GEOADD", "g", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"),
		same("GEOPOS", "g", "Palermo", "NonExisting"), same("GEODIST", "g", "Palermo", "Catania", "km"),
		same("GEOPOS", "nogeo", "x", "y"),
		same("BLPOP", "emptylist", "0.05"), same("RPUSH", "bl", "x"), same("BRPOP", "bl", "1"),
		same("BZPOPMIN", "emptyz", "0.05"), same("BLMPOP", "0.05", "1", "emptylist", "LEFT"),
		same("XADD", "st", "1-1", "f", "v"), same("XADD", "st", "1-1", "f", "v"), same("XRANGE", "st", "-", "+"),
		same("XLEN", "st"), same("XREAD", "COUNT", "1", "STREAMS", "st", "0"),
		same("XREAD", "BLOCK", "50", "STREAMS", "st", "$"),
		same("NOSUCHCOMMAND", "a", "b"), same("GET"), same("SET", "a"),
		same("EXISTS", "s", "n", "missing"), same("DEL", "n", "missing"), same("TYPE", "h"), same("TYPE", "missing"),
		same("TTL", "s"), same("PTTL", "missing"), same("EXPIRE", "missing", "10"), same("EXPIRE", "s", "100"),
		same("TTL", "s"), same("PERSIST", "s"),
		same("MSET", "m1", "1", "m2", "2"), same("MGET", "m1", "nope", "m2"),
		same("APPEND", "s", "w"), same("STRLEN", "s"), same("GETRANGE", "s", "0", "0"), same("SETRANGE", "s", "5", "!"),
		same("GET", "s"), same("SETNX", "s", "x"), same("GETSET", "s", "y"), same("GETDEL", "s"), same("GETEX", "s"),
		same("SET", "bin", bin), same("GET", "bin"), same("ECHO", bin), same("PING"), same("PING", "hello"),
		same("SET", "big", mib), same("GET", "big"), same("STRLEN", "big"), same("ECHO", mib),
		same("OBJECT", "ENCODING", "m1"), same("OBJECT", "FREQ", "m1"), same("CONFIG", "GET", "maxmemory-policy"),
		same("RENAME", "nokey", "x"), same("COPY", "m1", "m3"), same("SORT", "l2"),
		same("PFADD", "hll", "a", "b"), same("PFCOUNT", "hll"), same("SETBIT", "bits", "7", "1"), same("BITCOUNT", "bits"),
		same("GETBIT", "bits", "7"),
		// Transactions, sequential (spread over reads) and pipelined.
		same("MULTI"), same("SET", "tx", "1"), same("INCR", "tx"), same("LPUSH", "tx", "x"), same("EXEC"),
		{direct: cmd("MULTI"), pipelined: true}, {direct: cmd("INCR", "tx"), pipelined: true},
		{direct: cmd("NOSUCHCOMMAND"), pipelined: true}, {direct: cmd("EXEC"), pipelined: true},
		same("EXEC"), same("DISCARD"),
		// Queue-time errors, sequential: the server's error for each, and
		// EXECABORT (a nested MULTI alone does not abort).
		same("MULTI"), same("NOSUCHCOMMAND", "a"), same("SET", "tx", "2"), same("CONFIG", "NOPE"), same("GET"),
		same("SAVE"), same("MULTI"), same("EXEC"), same("GET", "tx"),
		same("MULTI"), same("MULTI"), same("INCR", "tx"), same("EXEC"),
		// Scripts: a read script passes; before it is loaded, NOSCRIPT.
		same("EVALSHA", peek.SHA, "1", q("pending")),
		same("SCRIPT", "LOAD", string(scripts.Body("peek"))),
		same("EVALSHA", peek.SHA, "1", q("pending")),
		same("EVALSHA", peek.SHA, "x"), same("EVALSHA", peek.SHA, "5", "a"), same("EVALSHA", peek.SHA, "-1"),
		// Verb scripts become EMQ.<TOKEN>: the module's replies, byte for byte.
		script(t, h, "enqueue", "2", q("job:J1"), q("pending"), "J1", "p1"),
		script(t, h, "enqueue", "2", q("job:J2"), q("pending"), "J2", bin),
		script(t, h, "enqueue", "2", q("job:J1"), q("pending"), "J1", "again"),
		script(t, h, "claim2", "2", q("pending"), q("active"), "30000"),
		clocked(script(t, h, "extend", "2", q("active"), q("job:J1"), "J1", "60000")),
		script(t, h, "complete", "3", q("active"), q("job:J1"), q("done"), "J1"),
		script(t, h, "complete", "3", q("active"), q("job:J1"), q("done"), "J1"),
		script(t, h, "claim2", "2", q("pending"), q("active"), "30000"),
		clocked(script(t, h, "fail", "4", q("active"), q("job:J2"), q("delayed"), q("dead"), "J2", "boom", "10", "0")),
		script(t, h, "promote", "2", q("delayed"), q("pending"), "10"),
		script(t, h, "pause", "1", q("paused")),
		script(t, h, "resume", "1", q("paused")),
		script(t, h, "claim2", "2", q("pending"), q("active"), "30000"),
		script(t, h, "claim2", "2", q("pending"), q("active"), "30000"),
		// Shapes that do not match the pin: the module's text, or the
		// server's EVALSHA text for a bad numkeys.
		script(t, h, "enqueue", "1", q("job:J3"), q("pending"), "J3"),
		script(t, h, "enqueue", "2", q("job:J3"), q("pending"), "J3"),
		script(t, h, "enqueue", "x", q("job:J3")),
		script(t, h, "enqueue", "-1"),
		script(t, h, "enqueue", "9", "a"),
		clocked(same("HGETALL", q("job:J1"))), same("ZRANGE", q("pending"), "0", "-1", "WITHSCORES"),
	}
	return steps
}

// run sends the corpus on c, returning each reply.
func runCorpus(t *testing.T, c *client, steps []step, proxied bool) [][]byte {
	t.Helper()
	var out [][]byte
	var pending [][]string
	for _, s := range steps {
		args := s.direct
		if proxied && s.proxied != nil {
			args = s.proxied
		}
		pending = append(pending, args)
		if s.pipelined {
			continue
		}
		c.send(pending...)
		for range pending {
			out = append(out, c.read().got)
		}
		pending = pending[:0]
	}
	return out
}

func TestFidelityDirectVersusProxy(t *testing.T) { node.EachServer(t, testFidelityDirectVersusProxy) }

func testFidelityDirectVersusProxy(t *testing.T, srv node.Server) {
	direct := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	h := startProxy(t, n, nil)
	steps := fidelityCorpus(t, h)
	if len(steps) < 80 {
		t.Fatalf("corpus has %d commands, want at least 80", len(steps))
	}
	want := runCorpus(t, dial(t, direct.Addr), steps, false)
	got := runCorpus(t, h.dial(), steps, true)
	kinds := map[byte]int{}
	for i := range steps {
		kinds[want[i][0]]++
		if steps[i].clock {
			if maskClock(got[i]) != maskClock(want[i]) {
				t.Errorf("step %d %q (shape):\n direct %s\n proxy  %s", i, short(steps[i].direct), short(string(want[i])), short(string(got[i])))
			}
			continue
		}
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("step %d %q:\n direct %s\n proxy  %s", i, short(steps[i].direct), short(string(want[i])), short(string(got[i])))
		}
	}
	for _, k := range []byte{'+', '-', ':', '$', '*'} {
		if kinds[k] == 0 {
			t.Errorf("the corpus produced no %q reply", k)
		}
	}
	for _, w := range []string{"$-1\r\n", "*-1\r\n", "-EMQWIRE ", "-NOSCRIPT ", "-WRONGTYPE ", "-EXECABORT "} {
		found := false
		for _, r := range want {
			found = found || bytes.HasPrefix(r, []byte(w))
		}
		if !found {
			t.Errorf("the corpus never produced %q", w)
		}
	}
	t.Logf("%d commands, reply kinds %v", len(steps), fmtKinds(kinds))
}

func TestFidelityExecAfterFailedWatch(t *testing.T) {
	node.EachServer(t, testFidelityExecAfterFailedWatch)
}

func testFidelityExecAfterFailedWatch(t *testing.T, srv node.Server) {
	direct := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	run := func(a, b *client) []string {
		var out []string
		for _, r := range []reply{a.do("WATCH", "k"), b.do("SET", "k", "other"), a.do("MULTI"), a.do("SET", "k", "mine"), a.do("EXEC")} {
			out = append(out, string(r.got))
		}
		return out
	}
	want := run(dial(t, direct.Addr), dial(t, direct.Addr))
	got := run(h.dial(), h.dial())
	if strings.Join(got, "") != strings.Join(want, "") || want[4] != "*-1\r\n" {
		t.Errorf("direct %q, proxy %q", want, got)
	}
}

func short(v any) string {
	s := fmt.Sprintf("%q", v)
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func fmtKinds(k map[byte]int) string {
	var b strings.Builder
	for _, c := range []byte("+-:$*") {
		fmt.Fprintf(&b, "%c%d ", c, k[c])
	}
	return b.String()
}
