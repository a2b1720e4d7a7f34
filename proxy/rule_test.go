package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// ruleRefused is the start of the rule's refusal of label by class.
func ruleRefused(label, class string) string {
	return "-EMQREFUSED emqproxy does not forward '" + label + "': shared-connection rule " + class + ": "
}

// denied is the deny list's refusal of entry.
func denied(entry string) string { return "-DENIED emqproxy does not forward '" + entry + "'\r\n" }

// ruleCase is a command outside the rule and the start of its refusal.
type ruleCase struct {
	args []string
	want string
}

// ruleCases are commands of every class the rule refuses, on both servers
// of the stand (Redis 7.0 and Valkey 8 share these table entries), and
// the deny list's and rewrite's refusals of the same families.
var ruleCases = []ruleCase{
	// reply: not exactly one reply.
	{cmd("REPLCONF", "GETACK", "*"), ruleRefused("REPLCONF", "reply")},
	{cmd("REPLCONF", "ACK", "0"), ruleRefused("REPLCONF", "reply")},
	{cmd("replconf", "listening-port", "1"), ruleRefused("REPLCONF", "reply")},
	{cmd("MONITOR"), denied("MONITOR")},
	{cmd("SYNC"), denied("SYNC")},
	{cmd("PSYNC", "?", "-1"), denied("PSYNC")},
	// admin.
	{cmd("BGSAVE"), ruleRefused("BGSAVE", "admin")},
	{cmd("SAVE"), ruleRefused("SAVE", "admin")},
	{cmd("BGREWRITEAOF"), ruleRefused("BGREWRITEAOF", "admin")},
	{cmd("LASTSAVE"), ruleRefused("LASTSAVE", "admin")},
	{cmd("ROLE"), ruleRefused("ROLE", "admin")},
	{cmd("SLOWLOG", "GET"), ruleRefused("SLOWLOG GET", "admin")},
	{cmd("SLOWLOG", "RESET"), ruleRefused("SLOWLOG RESET", "admin")},
	{cmd("LATENCY", "LATEST"), ruleRefused("LATENCY LATEST", "admin")},
	{cmd("LATENCY", "RESET"), ruleRefused("LATENCY RESET", "admin")},
	{cmd("ACL", "USERS"), ruleRefused("ACL USERS", "admin")},
	{cmd("ACL", "LOG"), ruleRefused("ACL LOG", "admin")},
	{cmd("ACL", "DRYRUN", "default", "GET", "k"), ruleRefused("ACL DRYRUN", "admin")},
	{cmd("CLIENT", "UNBLOCK", "1"), ruleRefused("CLIENT UNBLOCK", "admin")},
	{cmd("PFSELFTEST"), ruleRefused("PFSELFTEST", "admin")},
	{cmd("PFDEBUG", "GETREG", "hll"), ruleRefused("PFDEBUG", "admin")},
	{cmd("CLUSTER", "RESET"), ruleRefused("CLUSTER RESET", "admin")},
	{cmd("CONFIG", "RESETSTAT"), denied("CONFIG RESETSTAT")},
	{cmd("CONFIG", "SET", "maxmemory", "1"), denied("CONFIG SET")},
	{cmd("MODULE", "LIST"), denied("MODULE")},
	{cmd("DEBUG", "SLEEP", "0"), denied("DEBUG")},
	{cmd("SHUTDOWN", "NOSAVE"), denied("SHUTDOWN")},
	{cmd("CLIENT", "KILL", "ID", "1"), denied("CLIENT KILL")},
	{cmd("CLIENT", "PAUSE", "10"), denied("CLIENT PAUSE")},
	// dangerous.
	{cmd("RESTORE", "r", "0", "x"), ruleRefused("RESTORE", "dangerous")},
	{cmd("SWAPDB", "0", "1"), ruleRefused("SWAPDB", "dangerous")},
	{cmd("FLUSHDB"), denied("FLUSHDB")},
	{cmd("FLUSHALL"), denied("FLUSHALL")},
	{cmd("MIGRATE", "127.0.0.1", "1", "k", "0", "10"), denied("MIGRATE")},
	// noscript: acts on the connection it runs on.
	{cmd("ACL", "CAT"), ruleRefused("ACL CAT", "noscript")},
	{cmd("ACL", "GENPASS"), ruleRefused("ACL GENPASS", "noscript")},
	{cmd("FUNCTION", "LIST"), ruleRefused("FUNCTION LIST", "noscript")},
	{cmd("FUNCTION", "STATS"), ruleRefused("FUNCTION STATS", "noscript")},
	{cmd("FCALL_RO", "f", "0"), ruleRefused("FCALL_RO", "noscript")},
	{cmd("FUNCTION", "LOAD", "x"), denied("FUNCTION LOAD")},
	// secret: credentials.
	{cmd("ACL", "LIST"), ruleRefused("ACL LIST", "secret")},
	{cmd("ACL", "GETUSER", "default"), ruleRefused("ACL GETUSER", "secret")},
	{cmd("CONFIG", "GET", "requirepass"), ruleRefused("CONFIG GET", "secret")},
	{cmd("CONFIG", "GET", "maxmemory-policy", "MASTERAUTH"), ruleRefused("CONFIG GET", "secret")},
	{cmd("config", "get", "*"), ruleRefused("CONFIG GET", "secret")},
	{cmd("CONFIG", "GET", "*pass*"), ruleRefused("CONFIG GET", "secret")},
	{cmd("CONFIG", "GET", "tls-key-file-pass"), ruleRefused("CONFIG GET", "secret")},
	// database: another database.
	{cmd("MOVE", "k", "1"), ruleRefused("MOVE", "database")},
	{cmd("COPY", "k", "k2", "DB", "1"), ruleRefused("COPY", "database")},
	{cmd("COPY", "k", "k2", "REPLACE", "db", "15"), ruleRefused("COPY", "database")},
}

// TestSharedConnectionRuleKeepsOtherClientsReplies: two clients on one
// shared upstream connection; one sends each command the rule refuses, the
// other a read after each. The refusal is the rule's (its class named),
// the other client's reply is its own value and comes before the upstream
// timeout could have broken the connection, and none of the refused
// commands reached the node.
func TestSharedConnectionRuleKeepsOtherClientsReplies(t *testing.T) {
	node.EachServer(t, testSharedConnectionRule)
}

func testSharedConnectionRule(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	if _, err := node.RawDo(n.Addr, "SET", "secret", "topsecret"); err != nil {
		t.Fatal(err)
	}
	const upstreamTimeout = 5 * time.Second
	h := startProxy(t, n, func(o *Options) {
		o.Upstream.Conns = 1
		o.Upstream.Timeout = upstreamTimeout
		o.Upstream.ProbeInterval = -1
	})
	x, y := h.dial(), h.dial()
	before := nodeStats(t, n)
	var slowest time.Duration
	for _, tc := range ruleCases {
		x.send(tc.args)
		t0 := time.Now()
		y.do("GET", "secret").is("$9\r\ntopsecret\r\n")
		slowest = max(slowest, time.Since(t0))
		got := string(x.read().got)
		if !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, "\r\n") || strings.Count(got, "\r\n") != 1 {
			t.Errorf("%q: %q, want %q...", tc.args, got, tc.want)
		}
		x.do("PING").is("+PONG\r\n") // nothing else was answered in between
	}
	if slowest >= upstreamTimeout {
		t.Errorf("the other client's slowest reply took %v, the upstream timeout", slowest)
	}
	after := nodeStats(t, n)
	for name, calls := range after {
		if d := calls - before[name]; d != 0 && name != "get" && name != "info" {
			t.Errorf("%s reached the node %d times", name, d)
		}
	}
	if d := after["get"] - before["get"]; d != int64(len(ruleCases)) {
		t.Errorf("the node ran %d GETs, want %d", d, len(ruleCases))
	}
	t.Logf("%d refusals; the other client's slowest reply %v", len(ruleCases), slowest.Round(time.Microsecond))
}

// TestRuleExceptionsAnswerAsTheServer: the commands the rule lets through
// by its exceptions and argument checks get the server's own replies, as
// from the node directly.
func TestRuleExceptionsAnswerAsTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		setup := [][]string{cmd("SET", "k", "v"), cmd("RPUSH", "l", "3", "1", "2")}
		steps := [][]string{
			cmd("KEYS", "k*"), cmd("SORT", "l"), cmd("SORT_RO", "l", "DESC"), cmd("ACL", "WHOAMI"),
			cmd("CONFIG", "GET", "maxmemory-policy"), cmd("CONFIG", "GET", "appendonly"),
			cmd("CONFIG", "GET"), cmd("MOVE", "k", "0"), cmd("MOVE", "k", "x"), cmd("COPY", "k", "k2", "DB", "0"),
			cmd("UNSUBSCRIBE"), cmd("PUNSUBSCRIBE"), cmd("SUNSUBSCRIBE"), cmd("CLIENT", "CACHING", "YES"),
			cmd("UNWATCH"), cmd("XREAD", "STREAMS", "nostream", "0"), cmd("ACL", "HELP"),
			cmd("MULTI"), cmd("BLPOP", "nolist", "0"), cmd("WAIT", "0", "0"), cmd("EXEC"),
		}
		run := func(addr string) []string {
			c := dial(t, addr)
			for _, s := range setup {
				c.do(s...)
			}
			var out []string
			for _, s := range steps {
				out = append(out, string(c.do(s...).got))
			}
			if r := string(c.do("INFO", "server").got); !strings.HasPrefix(r, "$") || !strings.Contains(r, "_version:") {
				t.Errorf("INFO server: %q", short(r))
			}
			return out
		}
		direct := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
		n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
		want, got := run(direct.Addr), run(startProxy(t, n, nil).addr)
		for i := range steps {
			if got[i] != want[i] {
				t.Errorf("%q:\n direct %q\n proxy  %q", steps[i], short(want[i]), short(got[i]))
			}
		}
	})
}

// TestPolicyAllowOpensWhatItMayOpen: policy.allow opens the deny list's
// entries and the rule's admin, dangerous and noscript classes, by a
// command or its container; never the reply, secret and database checks
// or the protected keys.
func TestPolicyAllowOpensWhatItMayOpen(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
		h := startProxy(t, n, func(o *Options) {
			o.Policy.Allow = map[string]bool{"LASTSAVE": true, "ACL": true, "CONFIG": true, "REPLCONF": true,
				"SWAPDB": true, "FLUSHALL": true, "MOVE": true, "UNSUBSCRIBE": true, "FUNCTION LIST": true, "SET": true}
		})
		c := h.dial()
		c.do("SET", "k", "v").is("+OK\r\n")
		if r := string(c.do("LASTSAVE").got); !strings.HasPrefix(r, ":") {
			t.Errorf("LASTSAVE opened: %q", r)
		}
		c.do("ACL", "USERS").is("*1\r\n$7\r\ndefault\r\n")
		c.do("FUNCTION", "LIST").is("*0\r\n")
		c.do("CONFIG", "RESETSTAT").is("+OK\r\n") // the deny list's entry, lifted by "CONFIG"
		for _, tc := range []ruleCase{
			{cmd("FUNCTION", "STATS"), ruleRefused("FUNCTION STATS", "noscript")},
			{cmd("ACL", "LIST"), ruleRefused("ACL LIST", "secret")},
			{cmd("ACL", "GETUSER", "default"), ruleRefused("ACL GETUSER", "secret")},
			{cmd("CONFIG", "GET", "requirepass"), ruleRefused("CONFIG GET", "secret")},
			{cmd("CONFIG", "GET", "*"), ruleRefused("CONFIG GET", "secret")},
			{cmd("REPLCONF", "GETACK", "*"), ruleRefused("REPLCONF", "reply")},
			{cmd("SWAPDB", "0", "1"), ruleRefused("SWAPDB", "database")},
			{cmd("FLUSHALL"), ruleRefused("FLUSHALL", "database")},
			{cmd("MOVE", "k", "1"), ruleRefused("MOVE", "database")},
			{cmd("SET", "{emq}:version", "x"), "-FENCE {emq}:version belongs to emqproxy; write refused\r\n"},
			{cmd("SET", "{emqproxy}:epoch", "9"), "-FENCE {emqproxy}:epoch belongs to emqproxy; write refused\r\n"},
		} {
			c.do(tc.args...).hasPrefix(tc.want)
		}
		c.do("GET", "k").is("$1\r\nv\r\n")
	})
}
