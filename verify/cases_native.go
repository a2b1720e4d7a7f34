package verify

import (
	"slices"
	"strconv"
)

// The executable checks of the native-only verbs RESCHEDULE and REQUEUE
// (job-core.md rows 13-14): each runs on the native side only and is held
// to the state its row of the table gives.

// Edits of a normalised snapshot, for the expected states.

func rowKey(id string) string  { return "emq:{Q}:job:" + id }
func setKey(set string) string { return "emq:{Q}:" + set }

// zrem removes id from set; an empty set vanishes.
func zrem(s Snapshot, set, id string) {
	k := setKey(set)
	v, ok := s[k]
	if !ok {
		return
	}
	v.Members = slices.DeleteFunc(slices.Clone(v.Members), func(m Member) bool { return m.Name == id })
	if len(v.Members) == 0 {
		delete(s, k)
		return
	}
	s[k] = v
}

// zaddTo puts id into set at sc, in ZRANGE order (score, then member).
func zaddTo(s Snapshot, set, id string, sc float64) {
	zrem(s, set, id)
	k := setKey(set)
	v := s[k]
	v.Type = "zset"
	v.Members = append(slices.Clone(v.Members), Member{Name: id, Score: sc})
	slices.SortFunc(v.Members, func(a, b Member) int {
		switch {
		case a.Score < b.Score:
			return -1
		case a.Score > b.Score:
			return 1
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	s[k] = v
}

// hset sets (or, with del, deletes) a row field.
func hset(s Snapshot, id, field, val string, del bool) {
	k := rowKey(id)
	v := s[k]
	v.Type = "hash"
	if v.Hash == nil {
		v.Hash = map[string]string{}
	}
	if del {
		delete(v.Hash, field)
	} else {
		v.Hash[field] = val
	}
	s[k] = v
}

func rescheduled(id string, at float64) func(Snapshot) Snapshot {
	return func(s Snapshot) Snapshot {
		zrem(s, "pending", id)
		zaddTo(s, "delayed", id, at)
		hset(s, id, "state", "delayed", false)
		return s
	}
}

func requeued(id string) func(Snapshot) Snapshot {
	return func(s Snapshot) Snapshot {
		zrem(s, "active", id)
		zaddTo(s, "pending", id, 0)
		hset(s, id, "state", "pending", false)
		n, _ := strconv.ParseInt(s[rowKey(id)].Hash["attempts"], 10, 64)
		hset(s, id, "attempts", strconv.FormatInt(n-1, 10), false)
		hset(s, id, "lease_epoch", "", true)
		return s
	}
}

// orphanDropped removes id from the sets.
func orphanDropped(id string, sets ...string) func(Snapshot) Snapshot {
	return func(s Snapshot) Snapshot {
		for _, set := range sets {
			zrem(s, set, id)
		}
		return s
	}
}

func rescheduleCases() []testCase {
	t := "RESCHEDULE"
	n := func(name string, setup []Op, op Op, want *Reply, expect func(Snapshot) Snapshot) testCase {
		return testCase{Token: t, Name: name, Kind: kindNative, Setup: setup, Call: op, Want: want, Expect: expect}
	}
	return []testCase{
		n("pending", []Op{enq("J1", "p")}, resched("J1", "5000"), rInt(1), rescheduled("J1", 5000)),
		n("one of two pending", []Op{enq("J1", "a"), enq("J2", "b")}, resched("J2", "5000"), rInt(1), rescheduled("J2", 5000)),
		n("delayed at a literal run-at", delayedRow("J1", "1000"), resched("J1", "7000"), rInt(1), rescheduled("J1", 7000)),
		n("delayed after fail", delayedFail("J1", "60000"), resched("J1", "7000"), rInt(1), rescheduled("J1", 7000)),
		n("run_at 0", []Op{enq("J1", "p")}, resched("J1", "0"), rInt(1), rescheduled("J1", 0)),
		n("run_at 2^53-1", []Op{enq("J1", "p")}, resched("J1", "9007199254740991"), rInt(1), rescheduled("J1", 9007199254740991)),
		n("row says pending, id in no set", []Op{row("J1", "state", "pending", "attempts", "0", "payload", "p")}, resched("J1", "5000"), rInt(1), rescheduled("J1", 5000)),
		n("not pending or delayed: active", active("J1"), resched("J1", "5000"), rInt(0), nil),
		n("not pending or delayed: done", done("J1"), resched("J1", "5000"), rInt(0), nil),
		n("not pending or delayed: dead", dead("J1"), resched("J1", "5000"), rInt(0), nil),
		n("not pending or delayed: cancelled", []Op{enq("J1", "p"), cancel("J1")}, resched("J1", "5000"), rInt(0), nil),
		n("no such job", []Op{enq("J2", "b")}, resched("J1", "5000"), rInt(0), nil),
		// The Orphans rule: an id found in a set with no row is removed from
		// that set, and no row is written.
		n("orphan pending id (no row)", []Op{zadd("pending", "0", "J1"), enq("J2", "b")}, resched("J1", "5000"), rInt(0), orphanDropped("J1", "pending", "delayed")),
		n("orphan delayed id (no row)", []Op{zadd("delayed", "1000", "J1"), zadd("delayed", "2000", "J2")}, resched("J1", "5000"), rInt(0), orphanDropped("J1", "pending", "delayed")),
	}
}

func requeueCases() []testCase {
	t := "REQUEUE"
	n := func(name string, setup []Op, op Op, want *Reply, expect func(Snapshot) Snapshot) testCase {
		return testCase{Token: t, Name: name, Kind: kindNative, Setup: setup, Call: op, Want: want, Expect: expect}
	}
	second := ops(delayedFail("J1", "0"), []Op{promote("10"), claim(lease)})
	return []testCase{
		n("active", active("J1"), requeue("J1"), rInt(1), requeued("J1")),
		n("active after extend", append(active("J1"), extend("J1", lease2)), requeue("J1"), rInt(1), requeued("J1")),
		n("second attempt", second, requeue("J1"), rInt(1), requeued("J1")),
		n("one of two active", []Op{enq("J1", "a"), enq("J2", "b"), claim(lease), claim(lease)}, requeue("J2"), rInt(1), requeued("J2")),
		n("behind a pending job", []Op{enq("J1", "a"), claim(lease), enq("J2", "b")}, requeue("J1"), rInt(1), requeued("J1")),
		n("not active: pending", []Op{enq("J1", "p")}, requeue("J1"), rInt(0), nil),
		n("not active: delayed", delayedFail("J1", "60000"), requeue("J1"), rInt(0), nil),
		n("not active: done", done("J1"), requeue("J1"), rInt(0), nil),
		n("not active: no such job", nil, requeue("J1"), rInt(0), nil),
		n("orphan active id (no row)", []Op{zadd("active", "1000", "J1"), enq("J2", "b")}, requeue("J1"), rInt(0), orphanDropped("J1", "active")),
	}
}

// allCases is every case of the harness, in contract order; legacy is the
// foreign brand the fence cases put in place.
func allCases(legacy string) []testCase {
	var out []testCase
	for _, group := range [][]testCase{
		enqueueCases(), claimCases(), extendCases(), completeCases(), failCases(),
		retryCases(), cancelCases(), promoteCases(), reapCases(), pauseCases(),
		removeCases(), readCases(), edgeCases(), rescheduleCases(), requeueCases(),
	} {
		out = append(out, group...)
	}
	for _, v := range verbs {
		kind := kindDiff
		if nativeOnly[v.Token] {
			kind = kindNative
		}
		out = append(out, shapeCases(v, kind)...)
		out = append(out, layoutCases(v)...)
		out = append(out, fenceCases(v, legacy)...)
	}
	return out
}
