package moduletest

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// refusal is one malformed call and the exact error it must get.
type refusal struct {
	name string
	args []string
	want string
}

// seedQueue puts a little of everything into queue q, so that a call that
// wrongly got through would change the keyspace.
func seedQueue(c *conn, q string) {
	c.t.Helper()
	for _, id := range []string{"J1", "J2", "J3"} {
		if got := c.do("EMQ.ENQUEUE", "2", row(q, id), key(q, "pending"), id, "p-"+id); got != ":1\r\n" {
			c.t.Fatalf("seed enqueue %s: %q", id, got)
		}
	}
	if got := c.do("EMQ.CLAIM", "2", key(q, "pending"), key(q, "active"), "60000"); got[0] != '*' {
		c.t.Fatalf("seed claim: %q", got)
	}
	c.do("ZADD", key(q, "delayed"), "1", "J9")
	c.do("HSET", row(q, "J9"), "state", "delayed", "attempts", "1", "payload", "p")
	c.do("ZADD", key(q, "dead"), "1", "J8")
	c.do("HSET", row(q, "J8"), "state", "dead", "attempts", "3", "payload", "p", "error", "x")
}

// refusals builds the malformed calls of one verb on queue q.
func refusals(s shape, q string) []refusal {
	id := "J1"
	keys, vals := s.keys(q, id), s.vals(id)
	tok := "EMQ." + s.token
	n := len(keys) + len(vals)
	wire := func(format string, a ...any) string { return "EMQWIRE " + tok + " " + fmt.Sprintf(format, a...) }
	raw := func(numkeys string) []string {
		return append(append([]string{tok, numkeys}, keys...), vals...)
	}
	out := []refusal{
		{"numkeys negative", raw("-1"), "ERR Number of keys can't be negative"},
		{"numkeys not an integer", raw("two"), "ERR value is not an integer or out of range"},
		{"numkeys fraction", raw("1.5"), "ERR value is not an integer or out of range"},
		{"numkeys too large", raw(strconv.Itoa(n + 1)), "ERR Number of keys can't be greater than number of args"},
		{"no numkeys", []string{tok}, "ERR wrong number of arguments for '" + lower(tok) + "' command"},
		{"one key too few", raw(strconv.Itoa(len(keys) - 1)), wire("wants %d keys, got %d", len(keys), len(keys)-1)},
		{"one value too many", call(s.token, keys, append(slices.Clone(vals), "extra")),
			wire("wants %d values, got %d", len(vals), len(vals)+1)},
	}
	if len(vals) > 0 {
		out = append(out, refusal{"keys counted from numkeys", raw(strconv.Itoa(len(keys) + 1)),
			wire("wants %d keys, got %d", len(keys), len(keys)+1)})
		out = append(out, refusal{"one value too few", call(s.token, keys, vals[:len(vals)-1]),
			wire("wants %d values, got %d", len(vals), len(vals)-1)})
	}
	for _, j := range s.ints {
		for _, bad := range []string{"abc", "-1", "1.5", "+5", " 5", "", "9007199254740992", "0x10", "1e3"} {
			v := slices.Clone(vals)
			v[j-1] = bad
			out = append(out, refusal{fmt.Sprintf("value %d = %q", j, bad), call(s.token, keys, v),
				wire("value %d must be an integer", j)})
		}
		if s.token == "PROMOTE" || (s.token == "REAP" && j == 1) { // limits start at 1
			v := slices.Clone(vals)
			v[j-1] = "0"
			out = append(out, refusal{"limit 0", call(s.token, keys, v), wire("value %d must be an integer", j)})
		}
	}
	if p := s.rowPos(); p > 0 {
		for _, bad := range []string{row(q, "J2"), row(q, "J1x"), key(q, "job:"), "emq:{" + q + "}:jobs:J1", row("other", id)} {
			k := slices.Clone(keys)
			k[p-1] = bad
			out = append(out, refusal{"row key " + bad, call(s.token, k, vals), wire("key %d must be job:<id>", p)})
		}
	}
	// Layout: a key of another queue, a key in the wrong role, keys that are
	// not of the emq:{q}:<role> form. The first key not the row is where the
	// row check takes its prefix, so a defect there is a row-key error.
	prefixSource := 0
	if s.rowPos() == 1 {
		prefixSource = 1
	}
	for i, role := range s.roles {
		if role == "job" {
			continue
		}
		want := wire("key %d must be %s", i+1, role)
		if s.rowPos() > 0 && i == prefixSource {
			want = wire("key %d must be job:<id>", s.rowPos())
		}
		for _, bad := range []string{key("other", role), key(q, wrongRole(role)), key(q, role+"x"),
			"emq:{}:" + role, "emq:" + q + ":" + role, "emq:{" + q + "}" + role, "{" + q + "}:" + role} {
			k := slices.Clone(keys)
			k[i] = bad
			w := want
			if i == 0 && s.rowPos() == 0 && bad == key("other", role) {
				continue // key 1 sets the queue: the others are then of another queue
			}
			if s.rowPos() > 0 && i == prefixSource && lastColon(bad) == lastColon(keys[i]) {
				w = wire("key %d must be %s", i+1, role) // same prefix: the row check passes
			}
			out = append(out, refusal{fmt.Sprintf("key %d = %s", i+1, bad), call(s.token, k, vals), w})
		}
	}
	return out
}

// lastColon is s up to and including its last ':'.
func lastColon(s string) string {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return s[:i+1]
		}
	}
	return ""
}

// wrongRole is a role other than r.
func wrongRole(r string) string {
	if r == "pending" {
		return "active"
	}
	return "pending"
}

func lower(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}

// TestRefusals sends every malformed call of every verb and checks the
// exact error and that nothing was written.
func TestRefusals(t *testing.T) { node.EachServer(t, testRefusals) }

func testRefusals(t *testing.T, srv node.Server) {
	_, c := startModule(t, node.Options{Server: srv.Path})
	seedQueue(c, "a")
	total := 0
	for _, s := range shapes {
		for _, r := range refusals(s, "a") {
			before, d := snapshot(c), dirty(c)
			if got := c.do(r.args...); got != errReply(r.want) {
				t.Errorf("%s %s: %q\n got %q\nwant %q", s.token, r.name, r.args, got, errReply(r.want))
			}
			if dirty(c) != d || !equalMap(before, snapshot(c)) {
				t.Errorf("%s %s: the keyspace changed", s.token, r.name)
			}
			total++
		}
	}
	t.Logf("%d refusals checked", total)
}

// TestCheckOrder sends calls with two defects and checks the earlier check
// in the documented order answers.
func TestCheckOrder(t *testing.T) { node.EachServer(t, testCheckOrder) }

func testCheckOrder(t *testing.T, srv node.Server) {
	_, c := startModule(t, node.Options{Server: srv.Path})
	seedQueue(c, "a")
	c.do("SET", "{emq}:version", "echomq:4.0.0") // every call below also fails the fence
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"numkeys before shape", []string{"EMQ.EXTEND", "-1", "x"}, "ERR Number of keys can't be negative"},
		{"keys before values", []string{"EMQ.EXTEND", "1", key("a", "active")}, "EMQWIRE EMQ.EXTEND wants 2 keys, got 1"},
		{"values before value check", call("EXTEND", []string{key("a", "active"), row("a", "J1")}, []string{"J1", "x", "y"}),
			"EMQWIRE EMQ.EXTEND wants 2 values, got 3"},
		{"values in argument order", call("FAIL", []string{key("a", "active"), row("a", "J1"), key("a", "delayed"), key("a", "dead")},
			[]string{"J1", "e", "x", "y"}), "EMQWIRE EMQ.FAIL value 3 must be an integer"},
		{"value before row key", call("EXTEND", []string{key("a", "active"), row("a", "J2")}, []string{"J1", "x"}),
			"EMQWIRE EMQ.EXTEND value 2 must be an integer"},
		{"row key before layout", call("EXTEND", []string{"emq:{a}:pending", "emq:{a}:job:J2"}, []string{"J1", "5"}),
			"EMQWIRE EMQ.EXTEND key 2 must be job:<id>"},
		{"layout in key order", call("COMPLETE", []string{key("b", "pending"), row("b", "J1"), key("a", "active")}, []string{"J1"}),
			"EMQWIRE EMQ.COMPLETE key 1 must be active"},
		{"two queues", call("COMPLETE", []string{key("a", "active"), row("a", "J1"), key("b", "done")}, []string{"J1"}),
			"EMQWIRE EMQ.COMPLETE key 3 must be done"},
		{"layout before fence", call("PAUSE", []string{key("a", "pending")}, nil), "EMQWIRE EMQ.PAUSE key 1 must be paused"},
		{"fence last", call("PAUSE", []string{key("a", "paused")}, nil), "EMQWIRE expected echomq:6.0.0 found echomq:4.0.0"},
	} {
		d := dirty(c)
		if got := c.do(tc.args...); got != errReply(tc.want) {
			t.Errorf("%s: %q\n got %q\nwant %q", tc.name, tc.args, got, errReply(tc.want))
		}
		if dirty(c) != d {
			t.Errorf("%s: wrote", tc.name)
		}
	}
}

// TestFence runs every verb's valid call against an absent, a foreign and
// a non-string brand: each is refused and nothing is written.
func TestFence(t *testing.T) { node.EachServer(t, testFence) }

func testFence(t *testing.T, srv node.Server) {
	_, c := startModule(t, node.Options{Server: srv.Path})
	seedQueue(c, "a")
	const vk = "{emq}:version"
	for _, tc := range []struct {
		name  string
		setup func()
		want  string
	}{
		{"absent", func() { c.do("DEL", vk) }, "EMQWIRE expected echomq:6.0.0 found nil"},
		{"legacy", func() { c.do("SET", vk, "echomq:4.0.0") }, "EMQWIRE expected echomq:6.0.0 found echomq:4.0.0"},
		{"near miss", func() { c.do("SET", vk, "echomq:6.0.0 ") }, "EMQWIRE expected echomq:6.0.0 found echomq:6.0.0 "},
		{"empty", func() { c.do("SET", vk, "") }, "EMQWIRE expected echomq:6.0.0 found "},
		{"line breaks", func() { c.do("SET", vk, "a\r\nb\x00c") }, "EMQWIRE expected echomq:6.0.0 found a  b c"},
		{"not a string", func() { c.do("DEL", vk); c.do("RPUSH", vk, "echomq:6.0.0") },
			"WRONGTYPE Operation against a key holding the wrong kind of value"},
	} {
		tc.setup()
		for _, s := range shapes {
			args := s.valid("a", "NEW")
			if s.token == "CLAIM" || s.token == "PROMOTE" || s.token == "REAP" {
				args = s.valid("a", "J1")
			}
			before, d := snapshot(c), dirty(c)
			if got := c.do(args...); got != errReply(tc.want) {
				t.Errorf("%s brand, %s: got %q, want %q", tc.name, s.token, got, errReply(tc.want))
			}
			if dirty(c) != d || !equalMap(before, snapshot(c)) {
				t.Errorf("%s brand, %s: the keyspace changed", tc.name, s.token)
			}
		}
		c.do("DEL", vk)
	}
	// With the brand back, the same enqueue passes: the refusals above were the fence.
	c.do("SET", vk, "echomq:6.0.0")
	if got := c.do(shapes[0].valid("a", "NEW")...); got != ":1\r\n" {
		t.Errorf("enqueue after the brand is back = %q", got)
	}
}
