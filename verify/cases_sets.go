package verify

// The differential cases of RETRY, CANCEL, PROMOTE, REAP, PAUSE, RESUME and
// REMOVE (job-core.md rows 6-12) and of the two declared reads.

// delayedRow writes a delayed row and its set entry at a literal run-at.
func delayedRow(id, runAt string) []Op {
	return []Op{row(id, "state", "delayed", "attempts", "1", "payload", "p-"+id, "error", "boom"), zadd("delayed", runAt, id)}
}

// expiredRow writes an active row whose lease ended at a literal deadline.
func expiredRow(id, deadline, attempts string) []Op {
	return []Op{row(id, "state", "active", "attempts", attempts, "payload", "p-"+id), zadd("active", deadline, id)}
}

// atNowScript writes a row in the given state and puts its id in a time
// set at a score equal to the server's now, read with TIME: run in the
// lease-exact transaction, on a server with a cached clock, that is the
// very time the calls after it read. KEYS: the set, the row; ARGV: the id,
// the state.
const atNowScript = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], 'state', ARGV[2], 'attempts', '1', 'payload', 'p-' .. ARGV[1])
redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[1])
return now`

// atNow puts id in set (delayed or active, with the row's state to match)
// at a score equal to now.
func atNow(set, id string) []Op {
	return []Op{raw("EVAL", atNowScript, "2", "@"+set, "@job:"+id, id, set)}
}

func retryCases() []testCase {
	t := "RETRY"
	return []testCase{
		{Token: t, Name: "dead after fail", Setup: dead("J1"), Call: retry("J1"), Want: rInt(1)},
		{Token: t, Name: "dead after reap (lease-expired)", Setup: []Op{enq("J1", "p"), claim("0"), reap("10", "1")}, Call: retry("J1"), Want: rInt(1)},
		{Token: t, Name: "one of two dead", Setup: ops(dead("J1"), []Op{enq("J2", "b"), claim(lease), fail("J2", "x", "1", "0")}), Call: retry("J2"), Want: rInt(1)},
		{Token: t, Name: "not dead: delayed", Setup: delayedFail("J1", "60000"), Call: retry("J1"), Want: rInt(0)},
		{Token: t, Name: "not dead: pending", Setup: []Op{enq("J1", "p")}, Call: retry("J1"), Want: rInt(0)},
		{Token: t, Name: "not dead: active", Setup: active("J1"), Call: retry("J1"), Want: rInt(0)},
		{Token: t, Name: "not dead: no such job", Call: retry("J1"), Want: rInt(0)},
		{Token: t, Name: "orphan dead id", Setup: []Op{zadd("dead", "1000", "J1")}, Call: retry("J1")},
	}
}

func cancelCases() []testCase {
	t := "CANCEL"
	return []testCase{
		{Token: t, Name: "pending", Setup: []Op{enq("J1", "p")}, Call: cancel("J1"), Want: rInt(1)},
		{Token: t, Name: "one of two pending", Setup: []Op{enq("J1", "a"), enq("J2", "b")}, Call: cancel("J2"), Want: rInt(1)},
		{Token: t, Name: "delayed", Setup: delayedFail("J1", "60000"), Call: cancel("J1"), Want: rInt(1)},
		{Token: t, Name: "delayed at a literal run-at", Setup: delayedRow("J1", "1000"), Call: cancel("J1"), Want: rInt(1)},
		{Token: t, Name: "not pending: active", Setup: active("J1"), Call: cancel("J1"), Want: rInt(0)},
		{Token: t, Name: "not pending: done", Setup: done("J1"), Call: cancel("J1"), Want: rInt(0)},
		{Token: t, Name: "not pending: dead", Setup: dead("J1"), Call: cancel("J1"), Want: rInt(0)},
		{Token: t, Name: "not pending: cancelled already", Setup: []Op{enq("J1", "p"), cancel("J1")}, Call: cancel("J1"), Want: rInt(0)},
		{Token: t, Name: "not pending: no such job", Call: cancel("J1"), Want: rInt(0)},
		{Token: t, Name: "orphan pending id", Setup: []Op{zadd("pending", "0", "J1")}, Call: cancel("J1")},
		{Token: t, Name: "orphan delayed id", Setup: []Op{zadd("delayed", "1000", "J1")}, Call: cancel("J1")},
	}
}

func promoteCases() []testCase {
	t := "PROMOTE"
	three := ops(delayedRow("J1", "1000"), delayedRow("J2", "2000"), delayedRow("J3", "3000"))
	return []testCase{
		{Token: t, Name: "empty queue", Call: promote("10"), Want: rInt(0)},
		{Token: t, Name: "due after fail with backoff 0", Setup: delayedFail("J1", "0"), Call: promote("10"), Want: rInt(1)},
		{Token: t, Name: "not due yet", Setup: delayedFail("J1", "600000"), Call: promote("10"), Want: rInt(0)},
		{Token: t, Name: "due and not due", Setup: ops(delayedRow("J1", "1000"), []Op{enq("J2", "b"), claim(lease), fail("J2", "x", "3", "600000")}), Call: promote("10"), Want: rInt(1)},
		{Token: t, Name: "all of three", Setup: three, Call: promote("10"), Want: rInt(3)},
		{Token: t, Name: "limit 2 of three: lowest run-at first", Setup: three, Call: promote("2"), Want: rInt(2)},
		{Token: t, Name: "limit 1: ties order by id", Setup: ops(delayedRow("J2", "1000"), delayedRow("J1", "1000"), delayedRow("J3", "1000")), Call: promote("1"), Want: rInt(1)},
		{Token: t, Name: "limit 2^53-1", Setup: three, Call: promote("9007199254740991"), Want: rInt(3)},
		{Token: t, Name: "orphan counts toward the limit", Setup: ops([]Op{zadd("delayed", "1000", "J0")}, delayedRow("J1", "2000")), Call: promote("1"), Want: rInt(0)},
		{Token: t, Name: "orphan dropped, the rest promoted", Setup: ops([]Op{zadd("delayed", "1000", "J0")}, delayedRow("J1", "2000")), Call: promote("10"), Want: rInt(1)},
		{Token: t, Name: "lease-exact", Exact: true, Setup: ops(delayedFail("J1", "0"), delayedFail("J2", "600000")), Call: promote("10"), Want: rInt(1)},
		// Due means run-at <= now: a run-at of exactly now is promoted.
		{Token: t, Name: "lease-exact: run-at equal to now", Exact: true, AtNow: atNow("delayed", "J1"), Call: promote("10"), Want: rInt(1)},
	}
}

func reapCases() []testCase {
	t := "REAP"
	three := ops(expiredRow("J1", "1000", "1"), expiredRow("J2", "2000", "1"), expiredRow("J3", "3000", "1"))
	return []testCase{
		{Token: t, Name: "empty queue", Call: reap("10", "3"), Want: rInt(0)},
		{Token: t, Name: "lease not expired", Setup: active("J1"), Call: reap("10", "3"), Want: rInt(0)},
		{Token: t, Name: "expired below max: pending", Setup: expiredRow("J1", "1000", "1"), Call: reap("10", "3"), Want: rInt(1)},
		{Token: t, Name: "expired at max: dead", Setup: expiredRow("J1", "1000", "3"), Call: reap("10", "3"), Want: rInt(1)},
		{Token: t, Name: "expired above max: dead", Setup: expiredRow("J1", "1000", "5"), Call: reap("10", "3"), Want: rInt(1)},
		{Token: t, Name: "max 0: dead", Setup: expiredRow("J1", "1000", "0"), Call: reap("10", "0"), Want: rInt(1)},
		{Token: t, Name: "lease 0 claimed earlier", Setup: []Op{enq("J1", "p"), claim("0")}, Call: reap("10", "3"), Want: rInt(1)},
		{Token: t, Name: "expired and live", Setup: ops(expiredRow("J1", "1000", "1"), []Op{enq("J2", "b"), claim(lease)}), Call: reap("10", "3"), Want: rInt(1)},
		{Token: t, Name: "all of three", Setup: three, Call: reap("10", "3"), Want: rInt(3)},
		{Token: t, Name: "limit 2 of three: lowest deadline first", Setup: three, Call: reap("2", "3"), Want: rInt(2)},
		{Token: t, Name: "limit 1: ties order by id", Setup: ops(expiredRow("J2", "1000", "1"), expiredRow("J1", "1000", "1")), Call: reap("1", "3"), Want: rInt(1)},
		{Token: t, Name: "mixed: to pending and to dead", Setup: ops(expiredRow("J1", "1000", "1"), expiredRow("J2", "2000", "3")), Call: reap("10", "3"), Want: rInt(2)},
		{Token: t, Name: "orphan counts toward the limit", Setup: ops([]Op{zadd("active", "1000", "J0")}, expiredRow("J1", "2000", "1")), Call: reap("1", "3"), Want: rInt(0)},
		{Token: t, Name: "orphan dropped, the rest reaped", Setup: ops([]Op{zadd("active", "1000", "J0")}, expiredRow("J1", "2000", "1")), Call: reap("10", "3"), Want: rInt(1)},
		{Token: t, Name: "limit and max 2^53-1", Setup: three, Call: reap("9007199254740991", "9007199254740991"), Want: rInt(3)},
		{Token: t, Name: "lease-exact: to dead", Exact: true, Setup: []Op{enq("J1", "p"), claim("0")}, Call: reap("10", "1"), Want: rInt(1)},
		{Token: t, Name: "lease-exact: to pending", Exact: true, Setup: []Op{enq("J1", "p"), claim("0")}, Call: reap("10", "3"), Want: rInt(1)},
		// Expired means deadline < now: a lease ending exactly now is kept.
		{Token: t, Name: "lease-exact: deadline equal to now", Exact: true, AtNow: atNow("active", "J1"), Call: reap("10", "3"), Want: rInt(0)},
	}
}

func pauseCases() []testCase {
	return []testCase{
		{Token: "PAUSE", Name: "not paused", Call: pause(), Want: rInt(1)},
		{Token: "PAUSE", Name: "paused already", Setup: []Op{pause()}, Call: pause(), Want: rInt(0)},
		{Token: "PAUSE", Name: "paused by a flag of another value", Setup: []Op{raw("SET", "@paused", "yes")}, Call: pause(), Want: rInt(0)},
		{Token: "PAUSE", Name: "after resume", Setup: []Op{pause(), resume()}, Call: pause(), Want: rInt(1)},
		{Token: "PAUSE", Name: "queue with jobs", Setup: []Op{enq("J1", "p")}, Call: pause(), Want: rInt(1)},
		{Token: "RESUME", Name: "paused", Setup: []Op{pause()}, Call: resume(), Want: rInt(1)},
		{Token: "RESUME", Name: "not paused", Call: resume(), Want: rInt(0)},
		{Token: "RESUME", Name: "paused by a flag of another value", Setup: []Op{raw("SET", "@paused", "yes")}, Call: resume(), Want: rInt(1)},
		{Token: "RESUME", Name: "resumed already", Setup: []Op{pause(), resume()}, Call: resume(), Want: rInt(0)},
	}
}

func removeCases() []testCase {
	t := "REMOVE"
	return []testCase{
		{Token: t, Name: "pending", Setup: []Op{enq("J1", "p")}, Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "one of two pending", Setup: []Op{enq("J1", "a"), enq("J2", "b")}, Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "active", Setup: active("J1"), Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "delayed", Setup: delayedFail("J1", "60000"), Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "done", Setup: done("J1"), Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "dead", Setup: dead("J1"), Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "cancelled (row only)", Setup: []Op{enq("J1", "p"), cancel("J1")}, Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "orphan id in one set", Setup: []Op{zadd("done", "1000", "J1")}, Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "id in every set", Setup: []Op{row("J1", "state", "pending", "attempts", "0", "payload", "p"), zadd("pending", "0", "J1"), zadd("delayed", "1000", "J1"), zadd("active", "1000", "J1"), zadd("done", "1000", "J1"), zadd("dead", "1000", "J1")}, Call: remove("J1"), Want: rInt(1)},
		{Token: t, Name: "no such job", Setup: []Op{enq("J2", "b")}, Call: remove("J1"), Want: rInt(0)},
		{Token: t, Name: "empty queue", Call: remove("J1"), Want: rInt(0)},
	}
}

func readCases() []testCase {
	lifecycle := []Op{
		enq("J1", "a"), enq("J2", "b"), enq("J3", "c"), enq("J4", "d"), enq("J5", "e"),
		claim(lease), extend("J1", lease2), // J1 active
		claim(lease), complete("J2"), // J2 done
		claim(lease), fail("J3", "x", "1", "0"), // J3 dead
		claim(lease), fail("J4", "y", "3", "600000"), // J4 delayed
		pause(), // J5 pending
	}
	whole := []Op{
		enq("J1", "a"), enq("J2", "b"), enq("J3", "c"), enq("J4", "d"),
		claim(lease), extend("J1", lease2), complete("J1"),
		claim("0"), reap("10", "1"), retry("J2"), claim(lease), fail("J2", "z", "3", "0"), promote("10"),
		cancel("J3"), pause(), resume(), claim(lease), remove("J2"), claim(lease),
	}
	return []testCase{
		{Token: "stats", Name: "empty queue", Call: stats(), Want: rInts(0, 0, 0, 0, 0, 0)},
		{Token: "stats", Name: "one of each", Setup: lifecycle, Call: stats(), Want: rInts(1, 1, 1, 1, 1, 1)},
		{Token: "stats", Name: "paused, nothing else", Setup: []Op{pause()}, Call: stats(), Want: rInts(0, 0, 0, 0, 0, 1)},
		{Token: "stats", Name: "after a lifecycle through every scripted token", Setup: whole, Call: stats()},
		{Token: "peek", Name: "no such job", Call: peek("J1"), Want: rArr()},
		{Token: "peek", Name: "pending", Setup: []Op{enq("J1", "p")}, Call: peek("J1"), Want: rArr(rBulk("pending"), rBulk("0"), rBulk("p"))},
		{Token: "peek", Name: "active", Setup: active("J1"), Call: peek("J1"), Want: rArr(rBulk("active"), rBulk("1"), rBulk("p-J1"))},
		{Token: "peek", Name: "dead", Setup: dead("J1"), Call: peek("J1"), Want: rArr(rBulk("dead"), rBulk("1"), rBulk("p-J1"))},
		{Token: "peek", Name: "row without payload", Setup: []Op{row("J1", "state", "pending", "attempts", "0")}, Call: peek("J1"), Want: rArr(rBulk("pending"), rBulk("0"), rNilV())},
		{Token: "peek", Name: "after a lifecycle through every scripted token", Setup: whole, Call: peek("J4")},
	}
}
