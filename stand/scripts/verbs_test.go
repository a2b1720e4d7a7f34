package scripts

import (
	"strconv"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

const lease = 30000

// enqueue puts a new job on q and checks the script said so.
func (w *wire) enqueue(q queue, id, payload string) {
	w.t.Helper()
	w.expect(w.call("enqueue", q.keys("enqueue", id), id, payload), int64(1), "enqueue "+id)
}

// claim leases the next job of q.
func (w *wire) claim(q queue) any {
	w.t.Helper()
	return w.call("claim2", q.keys("claim2", ""), strconv.Itoa(lease))
}

func TestEnqueue(t *testing.T) { node.EachServer(t, testEnqueue) }

func testEnqueue(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("enq")
	w.enqueue(q, "J1", "p1")
	w.expect(w.row(q.job("J1")), map[string]string{"state": "pending", "attempts": "0", "payload": "p1"}, "row")
	w.expect(w.score(q.pending(), "J1"), int64(0), "pending score")

	// An existing row, whatever its state, is left alone.
	w.expect(w.call("enqueue", q.keys("enqueue", "J1"), "J1", "other"), int64(0), "enqueue existing")
	w.expect(w.row(q.job("J1"))["payload"], "p1", "payload after second enqueue")
	w.expect(w.call("cancel", q.keys("cancel", "J1"), "J1"), int64(1), "cancel")
	w.expect(w.call("enqueue", q.keys("enqueue", "J1"), "J1", "again"), int64(0), "enqueue cancelled")
	w.expect(w.score(q.pending(), "J1"), int64(-1), "cancelled id stays out of pending")
}

func TestClaim(t *testing.T) { node.EachServer(t, testClaim) }

func testClaim(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("claim")
	w.expect(w.claim(q), []any{}, "claim on an empty queue")

	w.enqueue(q, "J2", "p2")
	w.enqueue(q, "J1", "p1")
	w.do("ZADD", q.pending(), "0", "J0") // an orphan: no row, lowest id
	got, lo, hi := w.timed(func() any { return w.claim(q) })
	w.expect(got, []any{"J1", "p1", int64(1)}, "claim skips the orphan and takes the lowest id")
	w.expect(w.row(q.job("J1")), map[string]string{"state": "active", "attempts": "1", "payload": "p1"}, "row")
	if s := w.score(q.active(), "J1"); s < lo+lease || s > hi+lease {
		t.Fatalf("active score %d outside [%d, %d]", s, lo+lease, hi+lease)
	}
	w.expect(w.do("EXISTS", q.job("J0")), int64(0), "no row written for the orphan")
	w.expect(w.do("ZRANGE", q.pending(), "0", "-1"), []any{"J2"}, "pending after claim")

	// A raw EVALSHA claims a paused queue: the flag is the host's business.
	w.expect(w.call("pause", q.keys("pause", "")), int64(1), "pause")
	w.expect(w.claim(q), []any{"J2", "p2", int64(1)}, "claim on a paused queue")
	w.expect(w.claim(q), []any{}, "claim when only active jobs remain")
	w.expect(w.do("EXISTS", q.pending()), int64(0), "pending vanishes when empty")

	// Only orphans: all dropped, nothing claimed.
	w.do("ZADD", q.pending(), "0", "X1", "0", "X2")
	w.expect(w.claim(q), []any{}, "claim with only orphans")
	w.expect(w.do("EXISTS", q.pending()), int64(0), "orphans dropped")
}

func TestClaimCountsAttempts(t *testing.T) { node.EachServer(t, testClaimCountsAttempts) }

func testClaimCountsAttempts(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("attempts")
	w.enqueue(q, "J1", "p")
	for attempt := int64(1); attempt <= 3; attempt++ {
		w.expect(w.claim(q), []any{"J1", "p", attempt}, "claim")
		// Fail with no backoff, then promote it back to pending.
		w.call("fail", q.keys("fail", "J1"), "J1", "boom", "10", "0")
		w.expect(w.call("promote", q.keys("promote", ""), "10"), int64(1), "promote")
	}
}

func TestExtend(t *testing.T) { node.EachServer(t, testExtend) }

func testExtend(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("extend")
	w.enqueue(q, "J1", "p")
	w.expect(w.call("extend", q.keys("extend", "J1"), "J1", "5000"), int64(0), "extend a pending job")
	w.expect(w.do("EXISTS", q.active()), int64(0), "no active set created")
	w.claim(q)
	got, lo, hi := w.timed(func() any { return w.call("extend", q.keys("extend", "J1"), "J1", "90000") })
	deadline := w.within(got, lo+90000, hi+90000, "extend reply")
	w.expect(w.score(q.active(), "J1"), deadline, "active score is the replied deadline")
	w.expect(w.row(q.job("J1")), map[string]string{"state": "active", "attempts": "1", "payload": "p"}, "row untouched")
}

func TestComplete(t *testing.T) { node.EachServer(t, testComplete) }

func testComplete(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("complete")
	w.enqueue(q, "J1", "p")
	w.expect(w.call("complete", q.keys("complete", "J1"), "J1"), int64(0), "complete a pending job")
	w.claim(q)
	got, lo, hi := w.timed(func() any { return w.call("complete", q.keys("complete", "J1"), "J1") })
	w.expect(got, int64(1), "complete")
	w.within(w.score(q.done(), "J1"), lo, hi, "done score")
	w.expect(w.do("EXISTS", q.active()), int64(0), "active emptied")
	w.expect(w.row(q.job("J1"))["state"], "done", "state")
	w.expect(w.call("complete", q.keys("complete", "J1"), "J1"), int64(0), "complete twice")
}

func TestFail(t *testing.T) { node.EachServer(t, testFail) }

func testFail(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("fail")
	w.enqueue(q, "J1", "p")
	w.expect(w.call("fail", q.keys("fail", "J1"), "J1", "e", "3", "100"), int64(-1), "fail a pending job")
	w.expect(w.row(q.job("J1"))["error"], "", "no error written when not active")

	// attempts 1 < max 2: delayed until now+backoff.
	w.claim(q)
	got, lo, hi := w.timed(func() any { return w.call("fail", q.keys("fail", "J1"), "J1", "boom", "2", "5000") })
	runAt := w.within(got, lo+5000, hi+5000, "fail reply (run-at)")
	w.expect(w.score(q.delayed(), "J1"), runAt, "delayed score")
	w.expect(w.row(q.job("J1")), map[string]string{"state": "delayed", "attempts": "1", "payload": "p", "error": "boom"}, "row")
	w.expect(w.do("EXISTS", q.active()), int64(0), "active emptied")

	// attempts 2 >= max 2: dead at now.
	w.do("ZREM", q.delayed(), "J1")
	w.do("ZADD", q.pending(), "0", "J1")
	w.claim(q)
	got, lo, hi = w.timed(func() any { return w.call("fail", q.keys("fail", "J1"), "J1", "again", "2", "5000") })
	w.expect(got, int64(0), "fail reply (dead)")
	w.within(w.score(q.dead(), "J1"), lo, hi, "dead score")
	w.expect(w.row(q.job("J1")), map[string]string{"state": "dead", "attempts": "2", "payload": "p", "error": "again"}, "row")
	w.expect(w.do("EXISTS", q.delayed()), int64(0), "not delayed")
}

func TestRetry(t *testing.T) { node.EachServer(t, testRetry) }

func testRetry(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("retry")
	w.enqueue(q, "J1", "p")
	w.expect(w.call("retry", q.keys("retry", "J1"), "J1"), int64(0), "retry a pending job")
	w.claim(q)
	w.expect(w.call("fail", q.keys("fail", "J1"), "J1", "boom", "0", "0"), int64(0), "fail to dead")
	w.expect(w.call("retry", q.keys("retry", "J1"), "J1"), int64(1), "retry")
	w.expect(w.row(q.job("J1")), map[string]string{"state": "pending", "attempts": "0", "payload": "p"}, "row")
	w.expect(w.score(q.pending(), "J1"), int64(0), "pending score")
	w.expect(w.do("EXISTS", q.dead()), int64(0), "dead emptied")
}

func TestCancel(t *testing.T) { node.EachServer(t, testCancel) }

func testCancel(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("cancel")
	w.enqueue(q, "P1", "p")
	w.expect(w.call("cancel", q.keys("cancel", "P1"), "P1"), int64(1), "cancel pending")
	w.expect(w.row(q.job("P1"))["state"], "cancelled", "state")
	w.expect(w.do("EXISTS", q.pending()), int64(0), "pending emptied")
	w.expect(w.call("cancel", q.keys("cancel", "P1"), "P1"), int64(0), "cancel twice")

	w.enqueue(q, "D1", "p")
	w.claim(q)
	w.call("fail", q.keys("fail", "D1"), "D1", "e", "5", "60000")
	w.expect(w.call("cancel", q.keys("cancel", "D1"), "D1"), int64(1), "cancel delayed")
	w.expect(w.row(q.job("D1"))["state"], "cancelled", "state")
	w.expect(w.do("EXISTS", q.delayed()), int64(0), "delayed emptied")

	w.enqueue(q, "A1", "p")
	w.claim(q)
	w.expect(w.call("cancel", q.keys("cancel", "A1"), "A1"), int64(0), "cancel active")
	w.expect(w.row(q.job("A1"))["state"], "active", "active job untouched")
}

func TestPromote(t *testing.T) { node.EachServer(t, testPromote) }

func testPromote(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("promote")
	now := w.now()
	for _, j := range []struct {
		id string
		at int64
	}{{"A", now - 3000}, {"B", now - 2000}, {"C", now + 600000}} {
		w.do("HSET", q.job(j.id), "state", "delayed", "attempts", "1", "payload", "p")
		w.do("ZADD", q.delayed(), strconv.FormatInt(j.at, 10), j.id)
	}
	w.do("ZADD", q.delayed(), strconv.FormatInt(now-4000, 10), "O") // orphan, lowest score

	w.expect(w.call("promote", q.keys("promote", ""), "2"), int64(1), "promote 2: the orphan takes a place")
	w.expect(w.do("ZRANGE", q.delayed(), "0", "-1"), []any{"B", "C"}, "delayed after first promote")
	w.expect(w.row(q.job("A"))["state"], "pending", "A state")
	w.expect(w.do("EXISTS", q.job("O")), int64(0), "no row for the orphan")
	w.expect(w.call("promote", q.keys("promote", ""), "10"), int64(1), "promote the rest that is due")
	w.expect(w.do("ZRANGE", q.pending(), "0", "-1", "WITHSCORES"), []any{"A", "0", "B", "0"}, "pending")
	w.expect(w.do("ZRANGE", q.delayed(), "0", "-1"), []any{"C"}, "future job stays delayed")
	w.expect(w.row(q.job("C"))["state"], "delayed", "C state")
	w.expect(w.call("promote", q.keys("promote", ""), "10"), int64(0), "nothing due")
}

func TestReap(t *testing.T) { node.EachServer(t, testReap) }

func testReap(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("reap")
	now := w.now()
	for _, j := range []struct {
		id       string
		attempts string
		deadline int64
	}{{"X", "1", now - 3000}, {"Y", "3", now - 2000}, {"Z", "1", now + 600000}} {
		w.do("HSET", q.job(j.id), "state", "active", "attempts", j.attempts, "payload", "p")
		w.do("ZADD", q.active(), strconv.FormatInt(j.deadline, 10), j.id)
	}
	w.do("ZADD", q.active(), strconv.FormatInt(now-4000, 10), "O") // orphan, lowest score

	w.expect(w.call("reap", q.keys("reap", ""), "2", "3"), int64(1), "reap 2: the orphan takes a place")
	w.expect(w.row(q.job("X")), map[string]string{"state": "pending", "attempts": "1", "payload": "p"}, "X back to pending")
	w.expect(w.score(q.pending(), "X"), int64(0), "X pending score")
	w.expect(w.do("EXISTS", q.job("O")), int64(0), "no row for the orphan")

	got, lo, hi := w.timed(func() any { return w.call("reap", q.keys("reap", ""), "10", "3") })
	w.expect(got, int64(1), "reap the rest that expired")
	w.expect(w.row(q.job("Y")), map[string]string{"state": "dead", "attempts": "3", "payload": "p", "error": "lease-expired"}, "Y dead")
	w.within(w.score(q.dead(), "Y"), lo, hi, "dead score")
	w.expect(w.do("ZRANGE", q.active(), "0", "-1"), []any{"Z"}, "unexpired lease stays")
	w.expect(w.call("reap", q.keys("reap", ""), "10", "3"), int64(0), "nothing expired")
}

func TestPauseResume(t *testing.T) { node.EachServer(t, testPauseResume) }

func testPauseResume(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("pause")
	k := q.keys("pause", "")
	w.expect(w.call("resume", k), int64(0), "resume a running queue")
	w.expect(w.call("pause", k), int64(1), "pause")
	w.expect(w.do("GET", q.paused()), "1", "flag")
	w.expect(w.call("pause", k), int64(0), "pause twice")
	w.expect(w.call("resume", k), int64(1), "resume")
	w.expect(w.do("EXISTS", q.paused()), int64(0), "flag gone")
}

func TestRemove(t *testing.T) { node.EachServer(t, testRemove) }

func testRemove(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("remove")
	w.enqueue(q, "J1", "p")
	w.enqueue(q, "J2", "p")
	w.claim(q)                        // J1 active
	w.do("ZADD", q.done(), "5", "J1") // and, oddly, in done too
	w.expect(w.call("remove", q.keys("remove", "J1"), "J1"), int64(1), "remove")
	for _, k := range []string{q.job("J1"), q.active(), q.done()} {
		w.expect(w.do("EXISTS", k), int64(0), k+" after remove")
	}
	w.expect(w.score(q.pending(), "J2"), int64(0), "other job untouched")
	w.expect(w.call("remove", q.keys("remove", "J1"), "J1"), int64(0), "remove twice")
	w.do("ZADD", q.dead(), "1", "O") // an orphan in one set
	w.expect(w.call("remove", q.keys("remove", "O"), "O"), int64(1), "remove an orphan id")
	w.expect(w.do("EXISTS", q.dead()), int64(0), "dead emptied")
}

func TestStats(t *testing.T) { node.EachServer(t, testStats) }

func testStats(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("stats")
	k := q.keys("stats", "")
	w.expect(w.read("stats", k), []any{int64(0), int64(0), int64(0), int64(0), int64(0), int64(0)}, "empty queue")
	for _, id := range []string{"A", "B", "C", "D"} {
		w.enqueue(q, id, "p")
	}
	w.claim(q)                                                // A active
	w.claim(q)                                                // B active
	w.call("complete", q.keys("complete", "A"), "A")          // A done
	w.call("fail", q.keys("fail", "B"), "B", "e", "1", "0")   // B dead
	w.claim(q)                                                // C active
	w.call("fail", q.keys("fail", "C"), "C", "e", "5", "1e6") // bad value: no change
	w.call("fail", q.keys("fail", "C"), "C", "e", "5", "60000")
	w.call("pause", q.keys("pause", ""))
	w.expect(w.read("stats", k), []any{int64(1), int64(1), int64(0), int64(1), int64(1), int64(1)}, "stats")
}

func TestPeek(t *testing.T) { node.EachServer(t, testPeek) }

func testPeek(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("peek")
	w.expect(w.read("peek", q.keys("peek", "J1")), []any{}, "no row")
	w.enqueue(q, "J1", "p1")
	w.expect(w.read("peek", q.keys("peek", "J1")), []any{"pending", "0", "p1"}, "row")
	w.do("HSET", q.job("J2"), "state", "active")
	w.expect(w.read("peek", q.keys("peek", "J2")), []any{"active", nil, nil}, "missing fields are nil")
}

func TestReadsRunReadOnlyAndWritesDoNot(t *testing.T) {
	node.EachServer(t, testReadsRunReadOnlyAndWritesDoNot)
}

func testReadsRunReadOnlyAndWritesDoNot(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("ro")
	got := w.read("enqueue", q.keys("enqueue", "J1"), "J1", "p")
	if _, ok := got.(replyError); !ok {
		t.Fatalf("enqueue under EVALSHA_RO: %#v", got)
	}
	w.expect(w.do("EXISTS", q.job("J1")), int64(0), "nothing written under EVALSHA_RO")
}
