package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestNodeSecretsNeverInAReply: the node has a requirepass, a masterauth
// and an ACL user with a password; the proxy connects with the password,
// with policy.allow opening every family that could show them. No reply
// through the proxy holds a password or its hash, while the same commands
// sent directly do (so the check could fail).
func TestNodeSecretsNeverInAReply(t *testing.T) {
	node.EachServer(t, testNodeSecrets)
}

func testNodeSecrets(t *testing.T, srv node.Server) {
	const nodePW, alicePW, masterPW = "node-secret-pw-3141", "alice-secret-pw-2718", "master-secret-pw-1618"
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare, Password: nodePW,
		ACL: []string{"alice on >" + alicePW + " ~* &* +@all"}, Args: []string{"--masterauth", masterPW}})
	secrets := []string{nodePW, alicePW, masterPW}
	for _, s := range []string{nodePW, alicePW} {
		sum := sha256.Sum256([]byte(s))
		secrets = append(secrets, hex.EncodeToString(sum[:]))
	}
	leaks := func(r string) []string {
		var out []string
		for _, s := range secrets {
			if strings.Contains(r, s) {
				out = append(out, s)
			}
		}
		return out
	}
	direct := dial(t, n.Addr)
	direct.do("AUTH", nodePW).is("+OK\r\n")
	dial(t, n.Addr).do("AUTH", "alice", "wrong").hasPrefix("-WRONGPASS") // an ACL LOG entry
	// The direct answers hold them: the check can fail.
	for _, c := range [][]string{cmd("CONFIG", "GET", "requirepass"), cmd("CONFIG", "GET", "masterauth"),
		cmd("ACL", "GETUSER", "alice"), cmd("ACL", "LIST")} {
		if r := string(direct.do(c...).got); len(leaks(r)) == 0 {
			t.Fatalf("%q directly shows no secret: %q", c, short(r))
		}
	}
	h := startProxy(t, n, func(o *Options) {
		o.Policy.Allow = map[string]bool{"ACL": true, "CONFIG": true, "CLIENT": true, "SLOWLOG": true,
			"LATENCY": true, "MEMORY": true, "MODULE": true, "MONITOR": true, "DEBUG": true, "ROLE": true}
	})
	corpus := [][]string{
		cmd("CONFIG", "GET", "requirepass"), cmd("CONFIG", "GET", "REQUIREPASS"), cmd("CONFIG", "GET", "masterauth"),
		cmd("CONFIG", "GET", "*"), cmd("CONFIG", "GET", "*pass*"), cmd("CONFIG", "GET", "*auth"), cmd("CONFIG", "GET", "m?sterauth"),
		cmd("CONFIG", "GET", "maxmemory", "requirepass"), cmd("CONFIG", "GET", "[rm]*"), cmd("CONFIG", "GET", "primaryauth"),
		cmd("ACL", "LIST"), cmd("acl", "getuser", "alice"), cmd("ACL", "GETUSER", "default"), cmd("ACL", "USERS"),
		cmd("ACL", "LOG"), cmd("ACL", "DRYRUN", "alice", "GET", "k"), cmd("ACL", "WHOAMI"), cmd("ACL", "CAT"),
		cmd("INFO"), cmd("INFO", "everything"), cmd("CLIENT", "LIST"), cmd("CLIENT", "INFO"), cmd("SLOWLOG", "GET", "128"),
		cmd("LATENCY", "DOCTOR"), cmd("MEMORY", "DOCTOR"), cmd("MODULE", "LIST"), cmd("ROLE"), cmd("DEBUG", "HELP"),
		cmd("COMMAND", "INFO", "config"), cmd("MONITOR"),
	}
	for _, proto := range []string{"2", "3"} {
		c := h.dial()
		c.do("HELLO", proto).hasPrefix(map[string]string{"2": "*", "3": "%"}[proto])
		c.do("MULTI").is("+OK\r\n")
		c.do("ACL", "LIST").hasPrefix(ruleRefused("ACL LIST", "secret"))
		c.do("EXEC").hasPrefix("-EXECABORT")
		for _, args := range corpus {
			r := string(c.do(args...).got)
			if l := leaks(r); len(l) > 0 {
				t.Errorf("RESP%s %q answered %d secret(s): %q", proto, args, len(l), short(r))
			}
		}
		c.do("PING").hasPrefix("+PONG")
	}
	// What may pass still does: the answers are the server's.
	c := h.dial()
	if r := string(c.do("CONFIG", "GET", "maxmemory-policy").got); r != string(direct.do("CONFIG", "GET", "maxmemory-policy").got) {
		t.Errorf("CONFIG GET maxmemory-policy through the proxy: %q", r)
	}
	c.do("ACL", "USERS").is(string(direct.do("ACL", "USERS").got))
}

// TestOtherDatabasesUntouched: with every family opened by policy.allow,
// nothing through the proxy touches a database other than its own: SWAPDB,
// FLUSHALL, MOVE, COPY ... DB, MIGRATE and SELECT of another are refused
// (in RESP2, RESP3 and inside MULTI); the same commands on the configured
// database get the server's answers; the other database is as it was.
func TestOtherDatabasesUntouched(t *testing.T) {
	node.EachServer(t, testOtherDatabases)
}

func testOtherDatabases(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	d := dial(t, n.Addr)
	for _, c := range [][]string{cmd("SELECT", "1"), cmd("SET", "db1key", "one"), cmd("SELECT", "2"),
		cmd("SET", "k", "v"), cmd("SET", "gone", "x")} {
		d.do(c...).is("+OK\r\n")
	}
	h := startProxy(t, n, func(o *Options) {
		o.Upstream.DB, o.Policy.DB = 2, 2
		o.Policy.Allow = map[string]bool{"SWAPDB": true, "FLUSHALL": true, "MIGRATE": true, "MOVE": true, "COPY": true}
	})
	port := strconv.Itoa(n.Port)
	other := func(db string) string {
		return "it names database " + db + "; this proxy serves database 2 only\r\n"
	}
	every := "it touches every database of the node; this proxy serves database 2 only\r\n"
	refused := []ruleCase{
		{cmd("SWAPDB", "2", "1"), ruleRefused("SWAPDB", "database") + every},
		{cmd("SWAPDB", "2", "2"), ruleRefused("SWAPDB", "database") + every},
		{cmd("FLUSHALL"), ruleRefused("FLUSHALL", "database") + every},
		{cmd("MOVE", "k", "1"), ruleRefused("MOVE", "database") + other("1")},
		{cmd("MOVE", "k", "0"), ruleRefused("MOVE", "database") + other("0")},
		{cmd("COPY", "k", "k2", "DB", "1"), ruleRefused("COPY", "database") + other("1")},
		{cmd("COPY", "k", "db1key", "db", "1", "REPLACE"), ruleRefused("COPY", "database") + other("1")},
		{cmd("MIGRATE", "127.0.0.1", port, "k", "1", "1000"), ruleRefused("MIGRATE", "database") + other("1")},
		{cmd("MIGRATE", "127.0.0.1", port, "", "1", "1000", "KEYS", "k"), ruleRefused("MIGRATE", "database") + other("1")},
		{cmd("SELECT", "1"), "-ERR SELECT is not allowed: emqproxy serves database 2 only\r\n"},
	}
	for _, proto := range []string{"2", "3"} {
		c := h.dial()
		c.do("HELLO", proto)
		for _, tc := range refused {
			c.do(tc.args...).is(tc.want)
			c.do("MULTI").is("+OK\r\n")
			c.do(tc.args...).is(tc.want)
			c.do("EXEC").hasPrefix("-EXECABORT")
		}
	}
	// On its own database they are the server's business.
	c := h.dial()
	c.do("MOVE", "k", "2").hasPrefix("-ERR source and destination objects are the same")
	c.do("COPY", "k", "k2", "DB", "2").is(":1\r\n")
	c.do("DBSIZE").is(":3\r\n")
	d.do("SELECT", "1").is("+OK\r\n")
	d.do("DBSIZE").is(":1\r\n")
	d.do("GET", "db1key").is("$3\r\none\r\n")
	d.do("SELECT", "0").is("+OK\r\n")
	d.do("DBSIZE").is(":0\r\n")
}
