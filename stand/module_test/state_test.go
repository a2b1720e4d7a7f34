package moduletest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// startModule starts a module node (branded by EMQ.INSTALL unless
// opts.NoBrand) and returns it with an admin connection.
func startModule(t *testing.T, opts node.Options) (*node.Node, *conn) {
	t.Helper()
	opts.Role = node.Module
	n := node.StartT(t, opts)
	return n, dial(t, n.Addr)
}

// key is queue q's key of the given role: emq:{q}:role.
func key(q, role string) string { return "emq:{" + q + "}:" + role }

// row is the row key of job id in queue q.
func row(q, id string) string { return key(q, "job:"+id) }

// snapshot returns every key of the node with its DUMP, so two snapshots
// compare equal only when no key was added, removed or changed.
func snapshot(c *conn) map[string]string {
	c.t.Helper()
	out := map[string]string{}
	cursor := "0"
	for {
		v, ok := c.val("SCAN", cursor, "COUNT", "1000").([]any)
		if !ok || len(v) != 2 {
			c.t.Fatalf("SCAN: %#v", v)
		}
		cursor = v[0].(string)
		for _, k := range v[1].([]any) {
			out[k.(string)] = c.str("DUMP", k.(string))
		}
		if cursor == "0" {
			return out
		}
	}
}

// dirty is the server's count of writes since the last save; any write,
// even one that leaves the same value, moves it.
func dirty(c *conn) int64 {
	c.t.Helper()
	return infoInt(c, "persistence", "rdb_changes_since_last_save")
}

// infoField returns one field of an INFO section.
func infoField(c *conn, section, field string) string {
	c.t.Helper()
	for _, line := range strings.Split(c.str("INFO", section), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	c.t.Fatalf("INFO %s has no %s", section, field)
	return ""
}

func infoInt(c *conn, section, field string) int64 {
	c.t.Helper()
	n, err := strconv.ParseInt(infoField(c, section, field), 10, 64)
	if err != nil {
		c.t.Fatalf("INFO %s %s: %v", section, field, err)
	}
	return n
}

// serverMs is the server's clock in ms, as the verbs compute now.
func serverMs(c *conn) int64 {
	c.t.Helper()
	v := c.val("TIME").([]any)
	sec, _ := strconv.ParseInt(v[0].(string), 10, 64)
	usec, _ := strconv.ParseInt(v[1].(string), 10, 64)
	return sec*1000 + usec/1000
}

// timed runs one command and returns its exact reply with the server's
// time just before and just after it.
func timed(c *conn, args ...string) (reply string, before, after int64) {
	c.t.Helper()
	before = serverMs(c)
	reply = c.do(args...)
	after = serverMs(c)
	return reply, before, after
}

// within fails unless lo <= got <= hi.
func within(t testing.TB, what string, got, lo, hi int64) {
	t.Helper()
	if got < lo || got > hi {
		t.Errorf("%s = %d, want within [%d, %d]", what, got, lo, hi)
	}
}

// hash returns a hash as a map.
func hash(c *conn, k string) map[string]string {
	c.t.Helper()
	v := c.val("HGETALL", k).([]any)
	out := map[string]string{}
	for i := 0; i+1 < len(v); i += 2 {
		out[v[i].(string)] = v[i+1].(string)
	}
	return out
}

// zscores returns a sorted set as member -> score.
func zscores(c *conn, k string) map[string]int64 {
	c.t.Helper()
	v := c.val("ZRANGE", k, "0", "-1", "WITHSCORES").([]any)
	out := map[string]int64{}
	for i := 0; i+1 < len(v); i += 2 {
		f, err := strconv.ParseFloat(v[i+1].(string), 64)
		if err != nil {
			c.t.Fatalf("score %q: %v", v[i+1], err)
		}
		out[v[i].(string)] = int64(f)
	}
	return out
}

// equalMap reports whether two maps hold the same entries.
func equalMap[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
