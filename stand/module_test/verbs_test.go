package moduletest

import (
	"strconv"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// q is a small transcript helper for one queue of one node.
type q struct {
	t     testing.TB
	c     *conn
	name  string
	runID string // the server's run_id, the expected lease_epoch
}

func (x q) k(role string) string { return key(x.name, role) }
func (x q) row(id string) string { return row(x.name, id) }

// expect sends a verb call and checks its exact reply bytes.
func (x q) expect(want string, args ...string) {
	x.t.Helper()
	if got := x.c.do(args...); got != want {
		x.t.Errorf("%q = %q, want %q", args, got, want)
	}
}

// unchanged sends a call that must reply want and write nothing.
func (x q) unchanged(want string, args ...string) {
	x.t.Helper()
	d := dirty(x.c)
	x.expect(want, args...)
	if dirty(x.c) != d {
		x.t.Errorf("%q wrote", args)
	}
}

func (x q) enqueue(id, payload string) []string {
	return call("ENQUEUE", []string{x.row(id), x.k("pending")}, []string{id, payload})
}
func (x q) claim(lease string) []string {
	return call("CLAIM", []string{x.k("pending"), x.k("active")}, []string{lease})
}
func (x q) extend(id, lease string) []string {
	return call("EXTEND", []string{x.k("active"), x.row(id)}, []string{id, lease})
}
func (x q) complete(id string) []string {
	return call("COMPLETE", []string{x.k("active"), x.row(id), x.k("done")}, []string{id})
}
func (x q) fail(id, e, max, backoff string) []string {
	return call("FAIL", []string{x.k("active"), x.row(id), x.k("delayed"), x.k("dead")}, []string{id, e, max, backoff})
}
func (x q) retry(id string) []string {
	return call("RETRY", []string{x.k("dead"), x.row(id), x.k("pending")}, []string{id})
}
func (x q) cancel(id string) []string {
	return call("CANCEL", []string{x.k("pending"), x.k("delayed"), x.row(id)}, []string{id})
}
func (x q) promote(limit string) []string {
	return call("PROMOTE", []string{x.k("delayed"), x.k("pending")}, []string{limit})
}
func (x q) reap(limit, max string) []string {
	return call("REAP", []string{x.k("active"), x.k("pending"), x.k("dead")}, []string{limit, max})
}
func (x q) pause() []string  { return call("PAUSE", []string{x.k("paused")}, nil) }
func (x q) resume() []string { return call("RESUME", []string{x.k("paused")}, nil) }
func (x q) remove(id string) []string {
	return call("REMOVE", []string{x.row(id), x.k("pending"), x.k("delayed"), x.k("active"), x.k("done"), x.k("dead")}, []string{id})
}
func (x q) reschedule(id, at string) []string {
	return call("RESCHEDULE", []string{x.row(id), x.k("pending"), x.k("delayed")}, []string{id, at})
}
func (x q) requeue(id string) []string {
	return call("REQUEUE", []string{x.k("active"), x.row(id), x.k("pending")}, []string{id})
}

// put writes a row and its set membership directly (test setup).
func (x q) put(id, set string, score int64, fields ...string) {
	x.t.Helper()
	x.c.do("ZADD", x.k(set), strconv.FormatInt(score, 10), id)
	if len(fields) > 0 {
		x.c.do(append([]string{"HSET", x.row(id)}, fields...)...)
	}
}

func (x q) hash(id string) map[string]string { return hash(x.c, x.row(id)) }
func (x q) set(role string) map[string]int64 { return zscores(x.c, x.k(role)) }

func (x q) wantHash(id string, want map[string]string) {
	x.t.Helper()
	if got := x.hash(id); !equalMap(got, want) {
		x.t.Errorf("row %s = %v, want %v", id, got, want)
	}
}

func (x q) wantSet(role string, want map[string]int64) {
	x.t.Helper()
	if got := x.set(role); !equalMap(got, want) {
		x.t.Errorf("%s = %v, want %v", role, got, want)
	}
}

func (x q) wantNoRow(id string) {
	x.t.Helper()
	if x.c.num("EXISTS", x.row(id)) != 0 {
		x.t.Errorf("row %s exists, want none", id)
	}
}

// replyInt parses an integer reply.
func replyInt(t testing.TB, reply string) int64 {
	t.Helper()
	v, _, err := parse([]byte(reply))
	n, ok := v.(int64)
	if err != nil || !ok {
		t.Fatalf("want an integer reply, got %q", reply)
	}
	return n
}

// verbCase is the transcript of one verb (or two), run on a fresh queue.
type verbCase struct {
	name string
	run  func(x q)
}

// verbCases cover each verb's success path and every branch of its row in
// job-core.md, checking the reply bytes and the keys left behind.
var verbCases = []verbCase{
	{"ENQUEUE", func(x q) {
		x.expect(":1\r\n", x.enqueue("J1", "hello")...)
		x.wantHash("J1", map[string]string{"state": "pending", "attempts": "0", "payload": "hello"})
		x.wantSet("pending", map[string]int64{"J1": 0})
		x.unchanged(":0\r\n", x.enqueue("J1", "other")...)
		x.wantHash("J1", map[string]string{"state": "pending", "attempts": "0", "payload": "hello"})
		x.c.do("HSET", x.row("J2"), "state", "cancelled", "attempts", "0", "payload", "p")
		x.unchanged(":0\r\n", x.enqueue("J2", "again")...)
		bin := "a\x00b\r\nc"
		x.expect(":1\r\n", x.enqueue("J3", bin)...)
		x.wantHash("J3", map[string]string{"state": "pending", "attempts": "0", "payload": bin})
	}},

	{"CLAIM", func(x q) {
		t, c, runID := x.t, x.c, x.runID
		x.expect(":1\r\n", x.enqueue("J1", "hello")...)
		x.expect(":1\r\n", x.enqueue("J2", "world")...)
		reply, before, after := timed(c, x.claim("30000")...)
		if want := array(bulk("J1"), bulk("hello"), ":1\r\n"); reply != want {
			t.Errorf("claim = %q, want %q", reply, want)
		}
		x.wantHash("J1", map[string]string{"state": "active", "attempts": "1", "payload": "hello", "lease_epoch": runID})
		within(t, "lease deadline", x.set("active")["J1"], before+30000, after+30000)
		x.wantSet("pending", map[string]int64{"J2": 0})

		// An orphan ahead of J2 is dropped and J2 is claimed.
		x.c.do("ZADD", x.k("pending"), "0", "A0")
		x.expect(array(bulk("J2"), bulk("world"), ":1\r\n"), x.claim("0")...)
		x.wantNoRow("A0")
		if x.c.num("EXISTS", x.k("pending")) != 0 {
			t.Errorf("pending should be gone")
		}
		if _, ok := x.set("active")["A0"]; ok {
			t.Errorf("orphan leased")
		}
		x.unchanged("*0\r\n", x.claim("30000")...)

		// Only orphans: all dropped, empty reply, no row written.
		x.c.do("ZADD", x.k("pending"), "0", "O1", "0", "O2")
		x.expect("*0\r\n", x.claim("30000")...)
		x.wantNoRow("O1")
		x.wantNoRow("O2")
		x.wantSet("pending", map[string]int64{})

		// Paused (the key exists, whatever it holds): empty, nothing written.
		x.expect(":1\r\n", x.enqueue("J3", "p3")...)
		x.c.do("SET", x.k("paused"), "0")
		x.unchanged("*0\r\n", x.claim("30000")...)
		x.wantSet("pending", map[string]int64{"J3": 0})
		x.c.do("DEL", x.k("paused"))

		// attempts counts up from what the row holds; a missing payload is nil.
		x.c.do("HSET", x.row("J3"), "attempts", "4")
		x.c.do("HDEL", x.row("J3"), "payload")
		x.expect(array(bulk("J3"), "$-1\r\n", ":5\r\n"), x.claim("10")...)
	}},

	{"EXTEND", func(x q) {
		t, c, runID := x.t, x.c, x.runID
		x.expect(":1\r\n", x.enqueue("J1", "p")...)
		x.expect(array(bulk("J1"), bulk("p"), ":1\r\n"), x.claim("1000")...)
		x.c.do("HDEL", x.row("J1"), "lease_epoch")
		reply, before, after := timed(c, x.extend("J1", "5000")...)
		deadline := replyInt(t, reply)
		within(t, "extended deadline", deadline, before+5000, after+5000)
		x.wantSet("active", map[string]int64{"J1": deadline})
		x.wantHash("J1", map[string]string{"state": "active", "attempts": "1", "payload": "p", "lease_epoch": runID})
		x.unchanged(":0\r\n", x.extend("J2", "5000")...)
		x.put("GHOST", "active", 1)
		x.expect(":0\r\n", x.extend("GHOST", "5000")...)
		x.wantNoRow("GHOST")
		x.wantSet("active", map[string]int64{"J1": deadline})
	}},

	{"COMPLETE", func(x q) {
		t, c, runID := x.t, x.c, x.runID
		x.expect(":1\r\n", x.enqueue("J1", "p")...)
		x.c.do(x.claim("1000")...)
		reply, before, after := timed(c, x.complete("J1")...)
		if reply != ":1\r\n" {
			t.Errorf("complete = %q", reply)
		}
		within(t, "done score", x.set("done")["J1"], before, after)
		x.wantSet("active", map[string]int64{})
		x.wantHash("J1", map[string]string{"state": "done", "attempts": "1", "payload": "p", "lease_epoch": runID})
		x.unchanged(":0\r\n", x.complete("J1")...)
		x.put("GHOST", "active", 1)
		x.expect(":0\r\n", x.complete("GHOST")...)
		x.wantNoRow("GHOST")
		x.wantSet("active", map[string]int64{})
	}},

	{"FAIL", func(x q) {
		t, c, runID := x.t, x.c, x.runID
		x.expect(":1\r\n", x.enqueue("J1", "p")...)
		x.expect(":1\r\n", x.enqueue("J2", "p")...)
		x.c.do(x.claim("1000")...)
		x.c.do(x.claim("1000")...)
		reply, before, after := timed(c, x.fail("J1", "boom", "3", "1000")...)
		runAt := replyInt(t, reply)
		within(t, "run-at", runAt, before+1000, after+1000)
		x.wantSet("delayed", map[string]int64{"J1": runAt})
		x.wantHash("J1", map[string]string{"state": "delayed", "attempts": "1", "payload": "p", "error": "boom", "lease_epoch": runID})
		x.c.do("HSET", x.row("J2"), "attempts", "3")
		reply, before, after = timed(c, x.fail("J2", "bang", "3", "1000")...)
		if reply != ":0\r\n" {
			t.Errorf("fail to dead = %q", reply)
		}
		within(t, "dead score", x.set("dead")["J2"], before, after)
		x.wantHash("J2", map[string]string{"state": "dead", "attempts": "3", "payload": "p", "error": "bang", "lease_epoch": runID})
		x.wantSet("active", map[string]int64{})
		x.unchanged(":-1\r\n", x.fail("J1", "boom", "3", "1000")...)
		x.put("GHOST", "active", 1)
		x.expect(":-1\r\n", x.fail("GHOST", "boom", "3", "0")...)
		x.wantNoRow("GHOST")
		x.wantSet("active", map[string]int64{})
	}},

	{"RETRY", func(x q) {
		x.put("J8", "dead", 5, "state", "dead", "attempts", "3", "payload", "p", "error", "x")
		x.expect(":1\r\n", x.retry("J8")...)
		x.wantHash("J8", map[string]string{"state": "pending", "attempts": "0", "payload": "p"})
		x.wantSet("pending", map[string]int64{"J8": 0})
		x.wantSet("dead", map[string]int64{})
		x.unchanged(":0\r\n", x.retry("J8")...)
		x.put("GHOST", "dead", 1)
		x.expect(":0\r\n", x.retry("GHOST")...)
		x.wantNoRow("GHOST")
		x.wantSet("dead", map[string]int64{})
	}},

	{"CANCEL", func(x q) {
		x.expect(":1\r\n", x.enqueue("J1", "p")...)
		x.expect(":1\r\n", x.cancel("J1")...)
		x.wantHash("J1", map[string]string{"state": "cancelled", "attempts": "0", "payload": "p"})
		x.wantSet("pending", map[string]int64{})
		x.put("J2", "delayed", 7, "state", "delayed", "attempts", "1", "payload", "p")
		x.expect(":1\r\n", x.cancel("J2")...)
		x.wantHash("J2", map[string]string{"state": "cancelled", "attempts": "1", "payload": "p"})
		x.wantSet("delayed", map[string]int64{})
		x.put("J3", "active", 7, "state", "active", "attempts", "1", "payload", "p")
		x.unchanged(":0\r\n", x.cancel("J3")...)
		x.unchanged(":0\r\n", x.cancel("J1")...)
		x.put("GHOST", "delayed", 1)
		x.expect(":0\r\n", x.cancel("GHOST")...)
		x.wantNoRow("GHOST")
		x.wantSet("delayed", map[string]int64{})
	}},

	{"PROMOTE", func(x q) {
		c := x.c
		future := serverMs(c) + 1e9
		x.put("O", "delayed", 0)
		x.put("D1", "delayed", 1, "state", "delayed", "attempts", "1", "payload", "p")
		x.put("D2", "delayed", 2, "state", "delayed", "attempts", "1", "payload", "p")
		x.put("D3", "delayed", future, "state", "delayed", "attempts", "1", "payload", "p")
		x.expect(":1\r\n", x.promote("2")...) // the orphan counts toward the limit
		x.wantNoRow("O")
		x.wantSet("delayed", map[string]int64{"D2": 2, "D3": future})
		x.wantSet("pending", map[string]int64{"D1": 0})
		x.wantHash("D1", map[string]string{"state": "pending", "attempts": "1", "payload": "p"})
		x.expect(":1\r\n", x.promote("10")...)
		x.wantSet("pending", map[string]int64{"D1": 0, "D2": 0})
		x.wantSet("delayed", map[string]int64{"D3": future})
		x.unchanged(":0\r\n", x.promote("10")...)
	}},

	{"REAP", func(x q) {
		t, c := x.t, x.c
		future := serverMs(c) + 1e9
		x.put("O", "active", 0)
		x.put("R1", "active", 1, "state", "active", "attempts", "1", "payload", "p")
		x.put("R2", "active", 2, "state", "active", "attempts", "3", "payload", "p")
		x.put("R3", "active", future, "state", "active", "attempts", "1", "payload", "p")
		soon := serverMs(c) + 30000 // not yet expired: never reaped
		x.put("R4", "active", soon, "state", "active", "attempts", "1", "payload", "p")
		x.expect(":1\r\n", x.reap("2", "3")...) // O (orphan) and R1 in the window
		x.wantNoRow("O")
		x.wantHash("R1", map[string]string{"state": "pending", "attempts": "1", "payload": "p"})
		x.wantSet("pending", map[string]int64{"R1": 0})
		reply, before, after := timed(c, x.reap("10", "3")...)
		if reply != ":1\r\n" {
			t.Errorf("reap = %q", reply)
		}
		x.wantHash("R2", map[string]string{"state": "dead", "attempts": "3", "payload": "p", "error": "lease-expired"})
		within(t, "dead score", x.set("dead")["R2"], before, after)
		x.wantSet("active", map[string]int64{"R3": future, "R4": soon})
		x.unchanged(":0\r\n", x.reap("10", "3")...)
	}},

	{"PAUSE and RESUME", func(x q) {
		t := x.t
		x.expect(":1\r\n", x.pause()...)
		if got := x.c.str("GET", x.k("paused")); got != "1" {
			t.Errorf("paused = %q", got)
		}
		x.unchanged(":0\r\n", x.pause()...)
		x.expect(":1\r\n", x.resume()...)
		x.unchanged(":0\r\n", x.resume()...)
		if x.c.num("EXISTS", x.k("paused")) != 0 {
			t.Errorf("paused survived RESUME")
		}
	}},

	{"REMOVE", func(x q) {
		x.expect(":1\r\n", x.enqueue("J1", "p")...)
		x.c.do("ZADD", x.k("done"), "5", "J1")
		x.expect(":1\r\n", x.remove("J1")...)
		x.wantNoRow("J1")
		x.wantSet("pending", map[string]int64{})
		x.wantSet("done", map[string]int64{})
		x.unchanged(":0\r\n", x.remove("J1")...)
		x.put("GHOST", "dead", 1)
		x.expect(":1\r\n", x.remove("GHOST")...) // REMOVE counts anything removed
		x.wantSet("dead", map[string]int64{})
	}},

	{"RESCHEDULE", func(x q) {
		x.expect(":1\r\n", x.enqueue("J1", "p")...)
		x.expect(":1\r\n", x.reschedule("J1", "123456")...)
		x.wantSet("delayed", map[string]int64{"J1": 123456})
		x.wantSet("pending", map[string]int64{})
		x.wantHash("J1", map[string]string{"state": "delayed", "attempts": "0", "payload": "p"})
		x.expect(":1\r\n", x.reschedule("J1", "999")...)
		x.wantSet("delayed", map[string]int64{"J1": 999})
		x.put("J2", "active", 5, "state", "active", "attempts", "1", "payload", "p")
		x.unchanged(":0\r\n", x.reschedule("J2", "999")...)
		x.unchanged(":0\r\n", x.reschedule("NONE", "999")...)
		x.put("GHOST", "pending", 0)
		x.expect(":0\r\n", x.reschedule("GHOST", "999")...)
		x.wantNoRow("GHOST")
		x.wantSet("pending", map[string]int64{})
	}},

	{"REQUEUE", func(x q) {
		x.expect(":1\r\n", x.enqueue("J1", "p")...)
		x.expect(array(bulk("J1"), bulk("p"), ":1\r\n"), x.claim("1000")...)
		x.expect(":1\r\n", x.requeue("J1")...)
		x.wantHash("J1", map[string]string{"state": "pending", "attempts": "0", "payload": "p"})
		x.wantSet("pending", map[string]int64{"J1": 0})
		x.wantSet("active", map[string]int64{})
		x.unchanged(":0\r\n", x.requeue("J1")...)
		x.put("GHOST", "active", 1)
		x.expect(":0\r\n", x.requeue("GHOST")...)
		x.wantNoRow("GHOST")
		x.wantSet("active", map[string]int64{})
	}},

	{"seed transition", func(x q) {
		// The seed's enqueue then claim on quotes, JOB0KHTOWnGLuC, 30000 ms.
		t, c, runID := x.t, x.c, x.runID
		x.name = "quotes"
		id := "JOB0KHTOWnGLuC"
		x.expect(":1\r\n", x.enqueue(id, "<payload>")...)
		reply, before, after := timed(c, x.claim("30000")...)
		if want := array(bulk(id), bulk("<payload>"), ":1\r\n"); reply != want {
			t.Errorf("claim = %q, want %q", reply, want)
		}
		if x.c.num("EXISTS", x.k("pending")) != 0 {
			t.Errorf("pending set should be gone")
		}
		within(t, "lease", x.set("active")[id], before+30000, after+30000)
		x.wantHash(id, map[string]string{"state": "active", "attempts": "1", "payload": "<payload>", "lease_epoch": runID})
	}},
}

// TestVerbs runs every verb transcript on one module node.
func TestVerbs(t *testing.T) { node.EachServer(t, testVerbs) }

func testVerbs(t *testing.T, srv node.Server) {
	_, c := startModule(t, node.Options{Server: srv.Path})
	runID := infoField(c, "server", "run_id")
	for i, vc := range verbCases {
		t.Run(vc.name, func(t *testing.T) {
			vc.run(q{t: t, c: c.with(t), name: "t" + strconv.Itoa(i), runID: runID})
		})
	}
}
