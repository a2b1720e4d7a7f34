package proxy

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// sessionKind opens one kind of client session on c.
type sessionKind struct {
	name   string
	resp3  bool
	wire6  bool
	bridge bool // CLIENT TRACKING ON: bridged to a connection of its own
}

var sessionKinds = []sessionKind{
	{name: "resp2 wire-4"},
	{name: "resp2 wire-6", wire6: true},
	{name: "resp3 wire-4", resp3: true},
	{name: "resp3 wire-6", resp3: true, wire6: true},
	{name: "resp3 tracking wire-6", resp3: true, wire6: true, bridge: true},
	{name: "resp3 tracking wire-4", resp3: true, bridge: true},
}

// open starts the session on a new connection to addr.
func (k sessionKind) open(t *testing.T, addr string) *client {
	c := dial(t, addr)
	if k.resp3 {
		c.do("HELLO", "3").hasPrefix("%")
	}
	if k.bridge {
		c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n")
	}
	if k.wire6 {
		if r := c.do("EMQ.VERSION"); r.got[0] == '-' {
			t.Fatalf("EMQ.VERSION: %q", r.got)
		}
	}
	return c
}

// protectedWrites are the write forms against key k (the other keys they
// name exist on the node: other, src, set, zset).
func protectedWrites(k, dump, peekSHA, peekBody string) [][]string {
	return [][]string{
		{"SET", k, "x"}, {"SET", k, "x", "XX"}, {"SET", k, "x", "GET"}, {"SETNX", k, "x"}, {"SETEX", k, "10", "x"},
		{"PSETEX", k, "10000", "x"}, {"GETSET", k, "x"}, {"GETDEL", k}, {"GETEX", k, "PERSIST"},
		{"APPEND", k, "x"}, {"SETRANGE", k, "0", "x"}, {"INCR", k}, {"DECRBY", k, "1"}, {"SETBIT", k, "1", "1"},
		{"DEL", k}, {"UNLINK", "other", k}, {"EXPIRE", k, "10"}, {"PEXPIRE", k, "1000"}, {"EXPIREAT", k, "1"},
		{"PERSIST", k}, {"RENAME", k, "moved"}, {"RENAME", "other", k}, {"RENAMENX", "other", k},
		{"COPY", "other", k, "REPLACE"}, {"MOVE", k, "1"}, {"RESTORE", k, "0", dump, "REPLACE"},
		{"MSET", "other", "y", k, "x"}, {"MSETNX", k, "x"}, {"HSET", k, "f", "v"}, {"HDEL", k, "f"},
		{"LPUSH", k, "x"}, {"LMOVE", "src", k, "LEFT", "LEFT"}, {"RPOPLPUSH", "src", k},
		{"SORT", "src", "STORE", k}, {"SUNIONSTORE", k, "set"}, {"ZUNIONSTORE", k, "1", "zset"},
		{"BITOP", "OR", k, "other"}, {"PFMERGE", k}, {"XADD", k, "*", "f", "v"},
		{"EVALSHA", peekSHA, "1", k}, {"EVAL", peekBody, "1", k}, {"EVAL_RO", peekBody, "1", k},
		{"EVALSHA", enqueueSHA, "2", k, "emq:{q}:pending", "J1", "p"},
		{"EMQ.ENQUEUE", "2", k, "emq:{q}:pending", "J1", "p"},
	}
}

// TestProtectedKeysFromEverySession: every write form against the version
// key and the control table's keys, from every kind of session, inside
// MULTI and not, is refused and leaves the node unchanged; a wire-6
// session still reads the true version key, and any session reads the
// control table.
func TestProtectedKeysFromEverySession(t *testing.T) {
	node.EachServer(t, testProtectedKeys)
}

func testProtectedKeys(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	for _, c := range [][]string{
		{"SET", "other", "o"}, {"RPUSH", "src", "b", "a"}, {"SADD", "set", "m"}, {"ZADD", "zset", "1", "m"},
		{"SET", "{emqproxy}:epoch", "3"}, {"HSET", "{emqproxy}:queues", "billing", "3 held module-a"},
		{"HSET", "{emqproxy}:proxies", "p1", "{}"}, {"SET", "{emqproxy}:lease:p1", "3"},
	} {
		if _, err := node.RawDo(n.Addr, c...); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := node.RawDo(n.Addr, "DUMP", "other")
	if err != nil {
		t.Fatal(err)
	}
	dump, _, err := fence.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	h := startProxy(t, n, func(o *Options) {
		o.OnConnect = moduleHook(t)
		o.Upstream.ProbeInterval = -1
	})
	peek, _ := h.srv.Policy().Map.ByName("peek")
	forbidden := map[string]bool{"multi": true, "exec": true}
	for _, f := range protectedWrites("k", "", "", "") {
		forbidden[strings.ToLower(f[0])] = true
	}
	before := snapshot(t, n)
	for _, kind := range sessionKinds {
		t.Run(kind.name, func(t *testing.T) {
			c := kind.open(t, h.addr)
			for _, key := range []string{"{emq}:version", "{emqproxy}:epoch", "{emqproxy}:queues", "{emqproxy}:lease:p1"} {
				want := "-FENCE " + key + " belongs to emqproxy; write refused\r\n"
				for _, f := range protectedWrites(key, dump.Str, peek.SHA, string(scripts.Body("peek"))) {
					c.do(f...).is(want)
					c.do("MULTI").is("+OK\r\n")
					c.do(f...).is(want)
					c.do("EXEC").is("-EXECABORT Transaction discarded because of previous errors.\r\n")
				}
			}
			// Reads pass: the true key for wire 6, the legacy brand for wire 4.
			brand := "echomq:6.0.0"
			if !kind.wire6 {
				brand = h.srv.Policy().Map.LegacyBrand
			}
			c.do("GET", "{emq}:version").is("$" + itoa(len(brand)) + "\r\n" + brand + "\r\n")
			if r := string(c.do("HGETALL", "{emqproxy}:queues").got); !strings.Contains(r, "3 held module-a") {
				t.Errorf("HGETALL of the control table: %q", r)
			}
		})
	}
	after := snapshot(t, n)
	sameKeys(t, before, after)
	for name, calls := range after.stats {
		if d := calls - before.stats[name]; d != 0 && forbidden[name] {
			t.Errorf("%s reached the node %d times", name, d)
		}
	}
}

// sameKeys reports a change of the node's keyspace between two snapshots.
func sameKeys(t *testing.T, before, after upstreamState) {
	t.Helper()
	for k, v := range before.keys {
		if after.keys[k] != v {
			t.Errorf("key %s changed: %q, was %q", k, after.keys[k], v)
		}
	}
	for k := range after.keys {
		if _, ok := before.keys[k]; !ok {
			t.Errorf("key %s appeared", k)
		}
	}
}
