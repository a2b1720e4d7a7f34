package tail

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestStreamEffect: each kind of command of a replication stream records
// what it changes of the queue's keys: the members it names, the elements
// it pops, or the whole key; commands on other queues, other databases
// (but MOVE and COPY into ours) and unknown commands naming no key of the
// queue record nothing; flushes lose the tracking.
func TestStreamEffect(t *testing.T) {
	const p = "emq:{q}:"
	type want struct {
		whole      bool
		members    []string
		head, tail int64
	}
	cases := []struct {
		db   int
		cmd  string
		want map[string]want
		lost bool
	}{
		{0, "ZADD emq:{q}:pending 0 a 0 b", map[string]want{p + "pending": {members: []string{"a", "b"}}}, false},
		{0, "zadd emq:{q}:active XX CH 5 a", map[string]want{p + "active": {members: []string{"a"}}}, false},
		{0, "ZADD emq:{q}:active XX 5", map[string]want{p + "active": {whole: true}}, false},
		{0, "ZREM emq:{q}:active a b", map[string]want{p + "active": {members: []string{"a", "b"}}}, false},
		{0, "ZINCRBY emq:{q}:z 2 m", map[string]want{p + "z": {members: []string{"m"}}}, false},
		{0, "ZPOPMIN emq:{q}:pending", map[string]want{p + "pending": {head: 1}}, false},
		{0, "ZPOPMAX emq:{q}:pending 3", map[string]want{p + "pending": {tail: 3}}, false},
		{0, "ZPOPMIN emq:{q}:pending x", map[string]want{p + "pending": {whole: true}}, false},
		{0, "HSET emq:{q}:job:1 state active attempts 1", map[string]want{p + "job:1": {members: []string{"state", "attempts"}}}, false},
		{0, "HSET emq:{q}:job:1 state", map[string]want{p + "job:1": {whole: true}}, false},
		{0, "HINCRBY emq:{q}:job:1 attempts 1", map[string]want{p + "job:1": {members: []string{"attempts"}}}, false},
		{0, "HDEL emq:{q}:job:1 error", map[string]want{p + "job:1": {members: []string{"error"}}}, false},
		{0, "SREM emq:{q}:s x", map[string]want{p + "s": {members: []string{"x"}}}, false},
		{0, "SMOVE emq:{q}:s emq:{q}:t x", map[string]want{p + "s": {members: []string{"x"}}, p + "t": {members: []string{"x"}}}, false},
		{0, "PEXPIREAT emq:{q}:h 123", map[string]want{p + "h": {}}, false},
		{0, "DEL emq:{q}:job:1 emq:{q}:job:2 other", map[string]want{p + "job:1": {whole: true}, p + "job:2": {whole: true}}, false},
		{0, "ZREMRANGEBYSCORE emq:{q}:done -inf 5", map[string]want{p + "done": {whole: true}}, false},
		{0, "RENAME x emq:{q}:pending", map[string]want{p + "pending": {whole: true}}, false},
		{0, "ZADD emq:{other}:pending 0 a", map[string]want{}, false},
		{0, "SET emq:{q}x 1", map[string]want{}, false},
		{3, "ZADD emq:{q}:pending 0 a", map[string]want{}, false},
		{3, "MOVE emq:{q}:pending 0", map[string]want{p + "pending": {whole: true}}, false},
		{0, "FLUSHDB", nil, true},
		{3, "FLUSHDB", map[string]want{}, false},
		{3, "FLUSHALL", nil, true},
		{0, "SWAPDB 0 1", nil, true},
		{0, "SWAPDB 2 1", map[string]want{}, false},
	}
	for _, tc := range cases {
		var argv [][]byte
		for _, w := range strings.Fields(tc.cmd) {
			argv = append(argv, []byte(w))
		}
		got := map[string]*Change{}
		lost := streamEffect(tc.db, 0, argv, []byte(p), func(key []byte, fn func(*Change)) {
			c, ok := got[string(key)]
			if !ok {
				c = &Change{}
				got[string(key)] = c
			}
			fn(c)
		})
		if (lost != "") != tc.lost {
			t.Errorf("%s (db %d): lost %q, want lost %v", tc.cmd, tc.db, lost, tc.lost)
			continue
		}
		if tc.lost {
			continue
		}
		if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tc.want))) {
			t.Errorf("%s (db %d): keys %v, want %v", tc.cmd, tc.db, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tc.want)))
			continue
		}
		for k, w := range tc.want {
			c := got[k]
			ms := slices.Sorted(maps.Keys(c.Members))
			if c.Whole != w.whole || c.Head != w.head || c.Tail != w.tail || !slices.Equal(ms, slices.Sorted(slices.Values(w.members))) {
				t.Errorf("%s: %s recorded whole %v members %v head %d tail %d, want %+v", tc.cmd, k, c.Whole, ms, c.Head, c.Tail, w)
			}
		}
	}
}

// TestChangeBoundsItsMembers: a change that names more members than
// maxMembers becomes whole, and merging keeps the larger knowledge.
func TestChangeBoundsItsMembers(t *testing.T) {
	c := &Change{}
	for i := range maxMembers + 1 {
		c.add([]byte(strconv.Itoa(i)))
	}
	if !c.Whole || c.Members != nil {
		t.Fatalf("a change past %d members: whole %v, %d members", maxMembers, c.Whole, len(c.Members))
	}
	a := &Change{Head: 2}
	a.add([]byte("m"))
	b := &Change{Tail: 1}
	b.add([]byte("n"))
	a.Merge(b)
	if a.Whole || a.Head != 2 || a.Tail != 1 || len(a.Members) != 2 {
		t.Errorf("merged: %+v", a)
	}
	a.Merge(WholeChange())
	if !a.Whole {
		t.Error("merging a whole change is not whole")
	}
}
