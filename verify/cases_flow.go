package verify

// The differential cases of the success paths and branches of ENQUEUE,
// CLAIM, EXTEND, COMPLETE and FAIL (job-core.md rows 1-5).

const (
	lease    = "30000"
	lease2   = "60000"
	bigLease = "1000000000000000" // 10^15: a deadline with 16 digits, below 2^53
)

// ops joins op lists.
func ops(parts ...[]Op) []Op {
	var out []Op
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// active leaves id active (enqueued, claimed with the default lease) on an
// otherwise empty queue.
func active(id string) []Op { return []Op{enq(id, "p-"+id), claim(lease)} }

// dead leaves id dead after one failed attempt.
func dead(id string) []Op { return append(active(id), fail(id, "boom", "1", "0")) }

// delayedFail leaves id delayed after one failed attempt with backoff.
func delayedFail(id, backoff string) []Op {
	return append(active(id), fail(id, "boom", "3", backoff))
}

// done leaves id done.
func done(id string) []Op { return append(active(id), complete(id)) }

func claimRow(id, payload string, attempts int64) *Reply {
	return rArr(rBulk(id), rBulk(payload), rIntV(attempts))
}

func enqueueCases() []testCase {
	t := "ENQUEUE"
	return []testCase{
		{Token: t, Name: "new job", Call: enq("J1", "hello"), Want: rInt(1)},
		{Token: t, Name: "second job after the first", Setup: []Op{enq("J1", "a")}, Call: enq("J2", "b"), Want: rInt(1)},
		{Token: t, Name: "row exists: pending", Setup: []Op{enq("J1", "a")}, Call: enq("J1", "b"), Want: rInt(0)},
		{Token: t, Name: "row exists: active", Setup: active("J1"), Call: enq("J1", "b"), Want: rInt(0)},
		{Token: t, Name: "row exists: cancelled", Setup: []Op{enq("J1", "a"), cancel("J1")}, Call: enq("J1", "b"), Want: rInt(0)},
		{Token: t, Name: "row exists: done", Setup: done("J1"), Call: enq("J1", "b"), Want: rInt(0)},
		{Token: t, Name: "row exists: dead", Setup: dead("J1"), Call: enq("J1", "b"), Want: rInt(0)},
		{Token: t, Name: "id pending without a row", Setup: []Op{zadd("pending", "0", "J1")}, Call: enq("J1", "a"), Want: rInt(1)},
		{Token: t, Name: "empty payload", Call: enq("J1", ""), Want: rInt(1)},
		{Token: t, Name: "binary payload", Call: enq("J1", "\x00\xff\r\n bin \x80"), Want: rInt(1)},
	}
}

func claimCases() []testCase {
	t := "CLAIM"
	return []testCase{
		{Token: t, Name: "empty queue", Call: claim(lease), Want: rArr()},
		{Token: t, Name: "one pending", Setup: []Op{enq("J1", "p")}, Call: claim(lease), Want: claimRow("J1", "p", 1)},
		{Token: t, Name: "first in, first out", Setup: []Op{enq("J1", "a"), enq("J2", "b")}, Call: claim(lease), Want: claimRow("J1", "a", 1)},
		{Token: t, Name: "ties order by id", Setup: []Op{enq("J2", "b"), enq("J1", "a")}, Call: claim(lease), Want: claimRow("J1", "a", 1)},
		{Token: t, Name: "second claim of the queue", Setup: []Op{enq("J1", "a"), enq("J2", "b"), claim(lease)}, Call: claim(lease2), Want: claimRow("J2", "b", 1)},
		{Token: t, Name: "second attempt after fail and promote", Setup: ops(delayedFail("J1", "0"), []Op{promote("10")}), Call: claim(lease), Want: claimRow("J1", "p-J1", 2)},
		{Token: t, Name: "orphan id first is dropped", Setup: []Op{zadd("pending", "0", "J0"), enq("J1", "p")}, Call: claim(lease), Want: claimRow("J1", "p", 1)},
		{Token: t, Name: "only orphans", Setup: []Op{zadd("pending", "0", "J0"), zadd("pending", "0", "J00")}, Call: claim(lease), Want: rArr()},
		{Token: t, Name: "lease 0", Setup: []Op{enq("J1", "p")}, Call: claim("0"), Want: claimRow("J1", "p", 1)},
		{Token: t, Name: "lease 10^15", Setup: []Op{enq("J1", "p")}, Call: claim(bigLease), Want: claimRow("J1", "p", 1)},
		{Token: t, Name: "empty payload", Setup: []Op{enq("J1", "")}, Call: claim(lease), Want: claimRow("J1", "", 1)},
		{Token: t, Name: "resumed queue", Setup: []Op{enq("J1", "p"), pause(), resume()}, Call: claim(lease), Want: claimRow("J1", "p", 1)},
		{Token: t, Name: "paused by flag (declared)", Kind: kindPaused, Setup: []Op{enq("J1", "p"), raw("SET", "@paused", "1")}, Call: claim(lease)},
		{Token: t, Name: "paused by PAUSE (declared)", Kind: kindPaused, Setup: []Op{enq("J1", "p"), pause()}, Call: claim(lease)},
		{Token: t, Name: "paused empty queue (declared)", Kind: kindPaused, Setup: []Op{pause()}, Call: claim(lease)},
		{Token: t, Name: "lease-exact", Exact: true, Setup: []Op{enq("J1", "p")}, Call: claim(lease), Want: claimRow("J1", "p", 1)},
	}
}

func extendCases() []testCase {
	t := "EXTEND"
	return []testCase{
		{Token: t, Name: "active", Setup: active("J1"), Call: extend("J1", lease2)},
		{Token: t, Name: "extended twice", Setup: append(active("J1"), extend("J1", lease2)), Call: extend("J1", "90000")},
		{Token: t, Name: "shorter lease", Setup: active("J1"), Call: extend("J1", "1000")},
		{Token: t, Name: "lease 0", Setup: active("J1"), Call: extend("J1", "0")},
		{Token: t, Name: "lease 10^15", Setup: active("J1"), Call: extend("J1", bigLease)},
		{Token: t, Name: "not active: pending", Setup: []Op{enq("J1", "p")}, Call: extend("J1", lease2), Want: rInt(0)},
		{Token: t, Name: "not active: no such job", Call: extend("J1", lease2), Want: rInt(0)},
		{Token: t, Name: "not active: done", Setup: done("J1"), Call: extend("J1", lease2), Want: rInt(0)},
		{Token: t, Name: "not active: delayed", Setup: delayedFail("J1", "60000"), Call: extend("J1", lease2), Want: rInt(0)},
		{Token: t, Name: "another job active", Setup: []Op{enq("J1", "a"), enq("J2", "b"), claim(lease)}, Call: extend("J2", lease2), Want: rInt(0)},
		{Token: t, Name: "orphan active id", Setup: []Op{zadd("active", "5000", "J1")}, Call: extend("J1", lease2)},
		{Token: t, Name: "lease-exact", Exact: true, Setup: active("J1"), Call: extend("J1", lease2)},
	}
}

func completeCases() []testCase {
	t := "COMPLETE"
	return []testCase{
		{Token: t, Name: "active", Setup: active("J1"), Call: complete("J1"), Want: rInt(1)},
		{Token: t, Name: "one of two active", Setup: []Op{enq("J1", "a"), enq("J2", "b"), claim(lease), claim(lease2)}, Call: complete("J2"), Want: rInt(1)},
		{Token: t, Name: "after extend", Setup: append(active("J1"), extend("J1", lease2)), Call: complete("J1"), Want: rInt(1)},
		{Token: t, Name: "not active: pending", Setup: []Op{enq("J1", "p")}, Call: complete("J1"), Want: rInt(0)},
		{Token: t, Name: "not active: no such job", Call: complete("J1"), Want: rInt(0)},
		{Token: t, Name: "not active: done already", Setup: done("J1"), Call: complete("J1"), Want: rInt(0)},
		{Token: t, Name: "not active: delayed", Setup: delayedFail("J1", "60000"), Call: complete("J1"), Want: rInt(0)},
		{Token: t, Name: "not active: dead", Setup: dead("J1"), Call: complete("J1"), Want: rInt(0)},
		{Token: t, Name: "orphan active id", Setup: []Op{zadd("active", "5000", "J1")}, Call: complete("J1")},
		{Token: t, Name: "lease-exact", Exact: true, Setup: active("J1"), Call: complete("J1"), Want: rInt(1)},
	}
}

func failCases() []testCase {
	t := "FAIL"
	third := ops(delayedFail("J1", "0"), []Op{promote("10"), claim(lease), fail("J1", "boom", "3", "0"), promote("10"), claim(lease)})
	return []testCase{
		{Token: t, Name: "attempts below max: delayed", Setup: active("J1"), Call: fail("J1", "boom", "3", "5000")},
		{Token: t, Name: "attempts equal max: dead", Setup: active("J1"), Call: fail("J1", "boom", "1", "5000"), Want: rInt(0)},
		{Token: t, Name: "max 0: dead", Setup: active("J1"), Call: fail("J1", "boom", "0", "5000"), Want: rInt(0)},
		{Token: t, Name: "third attempt reaches max: dead", Setup: third, Call: fail("J1", "last", "3", "0"), Want: rInt(0)},
		{Token: t, Name: "second attempt below max: delayed", Setup: ops(delayedFail("J1", "0"), []Op{promote("10"), claim(lease)}), Call: fail("J1", "again", "3", "1000")},
		{Token: t, Name: "backoff 0", Setup: active("J1"), Call: fail("J1", "boom", "3", "0")},
		{Token: t, Name: "backoff 10^15", Setup: active("J1"), Call: fail("J1", "boom", "3", bigLease)},
		{Token: t, Name: "empty error text", Setup: active("J1"), Call: fail("J1", "", "3", "5000")},
		{Token: t, Name: "binary error text", Setup: active("J1"), Call: fail("J1", "\x00e\r\nrr", "3", "5000")},
		{Token: t, Name: "not active: pending", Setup: []Op{enq("J1", "p")}, Call: fail("J1", "boom", "3", "5000"), Want: rInt(-1)},
		{Token: t, Name: "not active: no such job", Call: fail("J1", "boom", "3", "5000"), Want: rInt(-1)},
		{Token: t, Name: "not active: done", Setup: done("J1"), Call: fail("J1", "boom", "3", "5000"), Want: rInt(-1)},
		{Token: t, Name: "not active: delayed", Setup: delayedFail("J1", "60000"), Call: fail("J1", "boom", "3", "5000"), Want: rInt(-1)},
		{Token: t, Name: "orphan active id", Setup: []Op{zadd("active", "5000", "J1")}, Call: fail("J1", "boom", "3", "5000")},
		{Token: t, Name: "lease-exact: delayed", Exact: true, Setup: active("J1"), Call: fail("J1", "boom", "3", "5000")},
		{Token: t, Name: "lease-exact: dead", Exact: true, Setup: active("J1"), Call: fail("J1", "boom", "1", "5000"), Want: rInt(0)},
	}
}
