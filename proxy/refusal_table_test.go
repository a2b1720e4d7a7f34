package proxy

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The refusal table of verification.md section 3: each row is what a client
// sends, the exact bytes it must get back, whether the proxy then closes the
// connection, and the proof that nothing reached the upstream: the node's
// keyspace (every key and its value's DUMP) and INFO commandstats are the
// same before and after the row.

// upstreamState is what the node holds and has run, for before/after checks.
type upstreamState struct {
	keys  map[string]string // key -> DUMP bytes
	stats map[string]int64  // INFO commandstats, without the commands the snapshot itself runs
}

// snapshotCommands are the commands a snapshot runs on the node itself.
var snapshotCommands = []string{"info", "keys", "dump"}

// snapshot reads the node's keyspace and command counters.
func snapshot(t testing.TB, n *node.Node) upstreamState {
	t.Helper()
	st := upstreamState{keys: map[string]string{}, stats: nodeStats(t, n)}
	for _, c := range snapshotCommands {
		delete(st.stats, c)
	}
	raw, err := node.RawDo(n.Addr, "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range bulkStrings(t, raw) {
		v, err := node.RawDo(n.Addr, "DUMP", k)
		if err != nil {
			t.Fatal(err)
		}
		st.keys[k] = string(v)
	}
	return st
}

// bulkStrings decodes a RESP array of bulk strings.
func bulkStrings(t testing.TB, raw []byte) []string {
	t.Helper()
	r, _, err := fence.Decode(raw)
	if err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	var out []string
	for _, e := range r.Elems {
		out = append(out, e.Str)
	}
	return out
}

// sameState reports every difference between two snapshots.
func sameState(t testing.TB, what string, before, after upstreamState) {
	t.Helper()
	if !maps.Equal(before.keys, after.keys) {
		ks := slices.Sorted(maps.Keys(after.keys))
		t.Errorf("%s: the upstream keyspace changed: before %d keys, after %d keys %q", what, len(before.keys), len(after.keys), ks)
	}
	for _, name := range slices.Sorted(maps.Keys(after.stats)) {
		if d := after.stats[name] - before.stats[name]; d != 0 {
			t.Errorf("%s: %s reached the upstream %d times", what, name, d)
		}
	}
}

// refusalRow is one row of the table.
type refusalRow struct {
	name   string
	send   []byte // what the client writes, in one write
	want   string // every reply byte the client gets, in order
	closes bool   // the proxy closes the connection after the replies
}

// commands encodes commands as RESP.
func commands(cmds ...[]string) []byte {
	var b []byte
	for _, c := range cmds {
		b = resp.AppendCommand(b, c...)
	}
	return b
}

// sha1hex is the hex SHA-1 of s.
func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

const (
	replyFenceWrite = "-FENCE {emq}:version belongs to emqproxy; write refused\r\n"
	enqueueSHA      = "7750f40b44bcdd7e0eaa5a8f2c66391ecbcde7f8" // stand/map.yaml: ENQUEUE, 2 keys, 2 values
	unknownSHA      = "0123456789abcdef0123456789abcdef01234567"
	unknownBody     = "return redis.call('SET', KEYS[1], 'lua')"
)

// refusalRows builds the table. maxBulk and maxMultibulk are the proxy's
// configured limits.
func refusalRows(maxBulk, maxMultibulk int) []refusalRow {
	rows := []refusalRow{
		{name: "unknown sha", send: commands(cmd("EVALSHA", unknownSHA, "1", "k")),
			want: "-EMQREFUSED script " + unknownSHA + " is not pinned; emqproxy does not run unpinned scripts\r\n"},
		{name: "unknown sha upper case", send: commands(cmd("EVALSHA", strings.ToUpper(unknownSHA), "0")),
			want: "-EMQREFUSED script " + unknownSHA + " is not pinned; emqproxy does not run unpinned scripts\r\n"},
		{name: "EVAL of an unknown body", send: commands(cmd("EVAL", unknownBody, "1", "k")),
			want: "-EMQREFUSED script " + sha1hex(unknownBody) + " is not pinned; emqproxy does not run unpinned scripts\r\n"},
		{name: "EVALSHA_RO of a write verb", send: commands(cmd("EVALSHA_RO", enqueueSHA, "2", "a", "b", "c", "d")),
			want: "-EMQREFUSED script " + enqueueSHA + " is the write verb EMQ.ENQUEUE; it cannot run read-only\r\n"},
		{name: "SCRIPT LOAD of an unknown body", send: commands(cmd("SCRIPT", "LOAD", unknownBody)),
			want: "-EMQREFUSED script " + sha1hex(unknownBody) + " is not pinned; emqproxy does not load unpinned scripts\r\n"},
		{name: "numkeys not an integer", send: commands(cmd("EVALSHA", enqueueSHA, "two", "a", "b", "c", "d")),
			want: "-ERR value is not an integer or out of range\r\n"},
		{name: "numkeys negative", send: commands(cmd("EVALSHA", enqueueSHA, "-1", "a")),
			want: "-ERR Number of keys can't be negative\r\n"},
		{name: "numkeys larger than the arguments", send: commands(cmd("EVALSHA", enqueueSHA, "5", "a", "b")),
			want: "-ERR Number of keys can't be greater than number of args\r\n"},
		{name: "numkeys not the pinned count", send: commands(cmd("EVALSHA", enqueueSHA, "1", "a", "b", "c", "d")),
			want: "-EMQWIRE EMQ.ENQUEUE wants 2 keys, got 1\r\n"},
		{name: "values not the pinned count", send: commands(cmd("EVALSHA", enqueueSHA, "2", "a", "b", "c")),
			want: "-EMQWIRE EMQ.ENQUEUE wants 2 values, got 1\r\n"},
		{name: "numkeys over the pinned count", send: commands(cmd("EVALSHA", enqueueSHA, "3", "a", "b", "c", "d")),
			want: "-EMQWIRE EMQ.ENQUEUE wants 2 keys, got 3\r\n"},

		// The version key, every write form.
		{name: "SET version", send: commands(cmd("SET", "{emq}:version", "echomq:4.0.0")), want: replyFenceWrite},
		{name: "SET version NX foreign brand", send: commands(cmd("SET", "{emq}:version", "foreign:1", "NX")), want: "$-1\r\n"},
		{name: "SET version XX", send: commands(cmd("SET", "{emq}:version", "x", "XX")), want: replyFenceWrite},
		{name: "SETNX version", send: commands(cmd("SETNX", "{emq}:version", "x")), want: replyFenceWrite},
		{name: "SETEX version", send: commands(cmd("SETEX", "{emq}:version", "10", "x")), want: replyFenceWrite},
		{name: "DEL version", send: commands(cmd("DEL", "{emq}:version")), want: replyFenceWrite},
		{name: "DEL version among others", send: commands(cmd("DEL", "a", "{emq}:version", "b")), want: replyFenceWrite},
		{name: "UNLINK version", send: commands(cmd("UNLINK", "{emq}:version")), want: replyFenceWrite},
		{name: "EXPIRE version", send: commands(cmd("EXPIRE", "{emq}:version", "1")), want: replyFenceWrite},
		{name: "PEXPIRE version", send: commands(cmd("PEXPIRE", "{emq}:version", "1")), want: replyFenceWrite},
		{name: "PERSIST version", send: commands(cmd("PERSIST", "{emq}:version")), want: replyFenceWrite},
		{name: "GETSET version", send: commands(cmd("GETSET", "{emq}:version", "x")), want: replyFenceWrite},
		{name: "GETDEL version", send: commands(cmd("GETDEL", "{emq}:version")), want: replyFenceWrite},
		{name: "GETEX version", send: commands(cmd("GETEX", "{emq}:version", "EX", "1")), want: replyFenceWrite},
		{name: "SETRANGE version", send: commands(cmd("SETRANGE", "{emq}:version", "0", "x")), want: replyFenceWrite},
		{name: "APPEND version", send: commands(cmd("APPEND", "{emq}:version", "x")), want: replyFenceWrite},
		{name: "INCR version", send: commands(cmd("INCR", "{emq}:version")), want: replyFenceWrite},
		{name: "RENAME to version", send: commands(cmd("RENAME", "other", "{emq}:version")), want: replyFenceWrite},
		{name: "RENAME from version", send: commands(cmd("RENAME", "{emq}:version", "other")), want: replyFenceWrite},
		{name: "RENAMENX to version", send: commands(cmd("RENAMENX", "other", "{emq}:version")), want: replyFenceWrite},
		{name: "COPY to version", send: commands(cmd("COPY", "other", "{emq}:version", "REPLACE")), want: replyFenceWrite},
		{name: "MOVE version", send: commands(cmd("MOVE", "{emq}:version", "1")), want: replyFenceWrite},
		{name: "MSET including version", send: commands(cmd("MSET", "a", "1", "{emq}:version", "x")), want: replyFenceWrite},
		{name: "MSETNX including version", send: commands(cmd("MSETNX", "{emq}:version", "x", "a", "1")), want: replyFenceWrite},
		{name: "RESTORE version", send: commands(cmd("RESTORE", "{emq}:version", "0", "x", "REPLACE")), want: replyFenceWrite},
		{name: "EVAL with version as a key", send: commands(cmd("EVAL", unknownBody, "1", "{emq}:version")), want: replyFenceWrite},
		{name: "version write inside MULTI",
			send: commands(cmd("MULTI"), cmd("SET", "a", "1"), cmd("SET", "{emq}:version", "x"), cmd("EXEC")),
			want: "+OK\r\n+QUEUED\r\n" + replyFenceWrite + "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{name: "version write inside a pipeline",
			send: commands(cmd("PING"), cmd("DEL", "{emq}:version"), cmd("ECHO", "after")),
			want: "+PONG\r\n" + replyFenceWrite + "$5\r\nafter\r\n"},

		// Malformed and over-limit input: the server's own texts, then closed.
		{name: "malformed: not a bulk in a multibulk", send: []byte("*2\r\n$3\r\nGET\r\n+k\r\n"),
			want: "-ERR Protocol error: expected '$', got '+'\r\n", closes: true},
		{name: "malformed: multibulk count not a number", send: []byte("*x\r\n"),
			want: "-ERR Protocol error: invalid multibulk length\r\n", closes: true},
		{name: "malformed: bulk length not a number", send: []byte("*1\r\n$abc\r\n"),
			want: "-ERR Protocol error: invalid bulk length\r\n", closes: true},
		{name: "malformed: negative bulk length", send: []byte("*1\r\n$-5\r\n"),
			want: "-ERR Protocol error: invalid bulk length\r\n", closes: true},
		{name: "malformed: unbalanced quotes inline", send: []byte("SET \"a b\r\n"),
			want: "-ERR Protocol error: unbalanced quotes in request\r\n", closes: true},
		{name: "over-limit multibulk count", send: []byte("*" + itoa(maxMultibulk+1) + "\r\n"),
			want: "-ERR Protocol error: invalid multibulk length\r\n", closes: true},
		{name: "over-limit bulk length", send: []byte("*2\r\n$3\r\nSET\r\n$" + itoa(maxBulk+1) + "\r\n"),
			want: "-ERR Protocol error: invalid bulk length\r\n", closes: true},
		{name: "over-limit inline command", send: bytes.Repeat([]byte("a"), DefaultMaxInline+1),
			want: "-ERR Protocol error: too big inline request\r\n", closes: true},
		{name: "over-limit header line", send: append([]byte("*1\r\n$"), bytes.Repeat([]byte("1"), DefaultMaxInline+1)...),
			want: "-ERR Protocol error: too big bulk count string\r\n", closes: true},
		{name: "a refused command before a protocol error still answers in order",
			send: append(commands(cmd("FLUSHALL")), "*1\r\n$x\r\n"...),
			want: "-DENIED emqproxy does not forward 'FLUSHALL'\r\n-ERR Protocol error: invalid bulk length\r\n", closes: true},
		{name: "*0 is ignored", send: []byte("*0\r\n*0\r\n*-1\r\n" + string(commands(cmd("ECHO", "x")))),
			want: "$1\r\nx\r\n"},
		{name: "commands after QUIT are dropped",
			send: commands(cmd("QUIT"), cmd("SET", "afterquit", "1"), cmd("FLUSHALL")),
			want: "+OK\r\n", closes: true},
		{name: "inline commands after QUIT are dropped",
			send: []byte("QUIT\r\nSET afterquit 1\r\n"), want: "+OK\r\n", closes: true},
	}
	// Every denied command, with an argument so arity is not what stops it.
	for _, entry := range slices.Sorted(maps.Keys(rewrite.DefaultDeny)) {
		args := append(strings.Fields(entry), "x")
		rows = append(rows, refusalRow{name: "denied " + entry, send: commands(args),
			want: "-DENIED emqproxy does not forward '" + entry + "'\r\n"})
		lower := append(strings.Fields(strings.ToLower(entry)), "x")
		rows = append(rows, refusalRow{name: "denied " + entry + " (lower case)", send: commands(lower),
			want: "-DENIED emqproxy does not forward '" + entry + "'\r\n"})
	}
	return rows
}

func itoa(n int) string { return strconv.Itoa(n) }

// counterValue reads a counter's value.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// vecTotal sums every counter of a vector.
func vecTotal(t testing.TB, v *prometheus.CounterVec) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	total := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		total += d.GetCounter().GetValue()
	}
	return total
}

func TestRefusalTable(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	if _, err := node.RawDo(n.Addr, "SET", "other", "kept"); err != nil {
		t.Fatal(err)
	}
	const maxBulk, maxMultibulk = 1 << 20, 4096
	h := startProxy(t, n, func(o *Options) {
		o.OnConnect = moduleHook(t)
		o.Upstream.ProbeInterval = -1 // the probe's own commands would blur commandstats
		o.MaxBulk, o.MaxMultibulk = maxBulk, maxMultibulk
	})
	rows := refusalRows(maxBulk, maxMultibulk)
	names := map[string]bool{}
	for _, r := range rows {
		if names[r.name] {
			t.Fatalf("duplicate row %q", r.name)
		}
		names[r.name] = true
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			before := snapshot(t, n)
			c := h.dial()
			c.write(r.send)
			got := make([]byte, len(r.want))
			if _, err := io.ReadFull(c.br, got); err != nil {
				t.Fatalf("read %d reply bytes: %v (got %q)", len(r.want), err, got)
			}
			if string(got) != r.want {
				t.Fatalf("replies\n got %q\nwant %q", got, r.want)
			}
			if r.closes {
				c.closed()
			} else {
				c.do("PING").is("+PONG\r\n") // nothing else was answered in between
			}
			sameState(t, r.name, before, snapshot(t, n))
		})
	}
	// The rows were refused, not lost: the refusal counters moved.
	if got := vecTotal(t, h.srv.met.Refusals); got == 0 {
		t.Error("no refusal was counted")
	}
	// Afterwards the proxy serves as before.
	h.dial().do("GET", "other").is("$4\r\nkept\r\n")
}

func TestClientThatNeverReadsIsClosed(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.WriteTimeout = 300 * time.Millisecond })
	big := strings.Repeat("v", 1<<20)
	h.dial().do("SET", "big", big).is("+OK\r\n")
	rejected := counterValue(t, h.srv.met.Rejected.WithLabelValues("write"))

	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.(*net.TCPConn).SetReadBuffer(4096)
	// Twice what the kernel can hold of the replies (the proxy's send
	// buffer at its largest, the client's receive buffer) plus 4 MiB, in
	// one batch under the reply cap; the client reads none. The proxy
	// reads every reply before its one write: that takes seconds under
	// the race detector on a loaded machine, hence the replies no larger
	// than they need to be and the generous wait.
	mibs := int(2*sysctlInt(t, "/proc/sys/net/ipv4/tcp_wmem", 2)>>20) + 4
	if mibs > 32 {
		t.Fatalf("the kernel's send buffer (%d MiB of replies to fill) is past what this test sends under the reply cap", mibs)
	}
	var b []byte
	for range mibs {
		b = resp.AppendCommand(b, "GET", "big")
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	other := h.dial()
	start := time.Now()
	node.PollWithin(t, "the client to be closed for not reading", 2*time.Minute, func() bool {
		return counterValue(t, h.srv.met.Rejected.WithLabelValues("write")) > rejected
	})
	t.Logf("closed %v after its batch of %d MiB was sent (write timeout 300ms)", time.Since(start).Round(time.Millisecond), mibs)
	// Others were served all along, and still are.
	other.do("STRLEN", "big").is(":1048576\r\n")
	poll(t, "the session to go", func() bool { return h.srv.clients.Load() == 2 }) // the setter and other
	// The connection is reset, not left to drain the unsent replies.
	_ = nc.SetReadDeadline(time.Now().Add(testTimeout))
	_, err = io.Copy(io.Discard, nc)
	if err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("reading the closed client: %v, want a reset", err)
	}
}

// sysctlInt reads the field'th number (from 0) of a /proc/sys file.
func sysctlInt(t *testing.T, path string, field int) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if field >= len(f) {
		t.Fatalf("%s: %q has no field %d", path, b, field)
	}
	v, err := strconv.ParseInt(f[field], 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}
