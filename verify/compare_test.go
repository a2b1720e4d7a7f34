package verify

import "testing"

// Scores are matched to the window of their own step with its offset; two
// sides agree when they name a common step time.
func TestStampWindows(t *testing.T) {
	steps := []stepResult{
		{Op: claim("30000"), Timed: true, Win: window{1000, 1002}},
		{Op: complete("J1"), Timed: true, Win: window{1003, 1003}},
		{Op: zadd("delayed", "500", "J9")},
	}
	st := newStamper(steps)
	for _, tc := range []struct {
		score float64
		ok    bool
		step  int
	}{
		{31001, true, 0},  // claim's lease window
		{1003, true, 1},   // complete's now
		{500, true, -1},   // a literal of a raw setup
		{31003, false, 0}, // past the claim's window
		{1001, false, 0},  // claim wrote no bare "now"
	} {
		sp, ok := st.maskScore(tc.score)
		if ok != tc.ok {
			t.Errorf("score %v: ok %v, want %v (%s)", tc.score, ok, tc.ok, sp)
			continue
		}
		if ok && tc.step >= 0 && (len(sp.Refs) != 1 || sp.Refs[0].Step != tc.step) {
			t.Errorf("score %v: refs %v, want step %d", tc.score, sp.Refs, tc.step)
		}
	}
	a, _ := st.maskScore(31000)
	b, _ := st.maskScore(31002)
	if !a.same(b) {
		t.Error("two scores of one step window do not compare equal")
	}
	c, _ := st.maskScore(1003)
	if a.same(c) {
		t.Error("scores of different steps compare equal")
	}
}

// lease_epoch must be the run_id on rows the native side leased, absent
// elsewhere, and is masked afterwards.
func TestLeaseEpochDelta(t *testing.T) {
	steps := []stepResult{{Op: claim("30000"), Timed: true, Win: window{1000, 1000}, Reply: *claimRow("J1", "p", 1)}}
	snap := Snapshot{
		"emq:{Q}:job:J1": {Type: "hash", Hash: map[string]string{"state": "active", "lease_epoch": "run"}},
		"emq:{Q}:job:J2": {Type: "hash", Hash: map[string]string{"state": "pending", "lease_epoch": "run"}},
		"emq:{Q}:active": {Type: "zset", Members: []Member{{"J1", 31000}}},
	}
	m, diffs := maskSide(nativeSide, snap, steps, "run")
	if len(diffs) != 1 || diffs[0].Where != "native side, key emq:{Q}:job:J2 field lease_epoch" {
		t.Errorf("diffs %v: want one, for the row never leased", diffs)
	}
	if _, has := m.snap["emq:{Q}:job:J1"].Hash["lease_epoch"]; has {
		t.Error("lease_epoch not masked")
	}
	if _, has := snap["emq:{Q}:job:J1"].Hash["lease_epoch"]; !has {
		t.Error("masking changed the caller's snapshot")
	}
	if _, diffs := maskSide(scriptSide, snap, steps, "run"); len(diffs) != 2 {
		t.Errorf("script side with lease_epoch: %d diffs, want 2", len(diffs))
	}
}

// The expected layout error follows the contract's order: the row key
// first (prefix from the first key that is not the row key), then layout.
func TestExpectedKeyError(t *testing.T) {
	ext := verbByToken("EXTEND")
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{"@bogus", "@job:J1"}, "EMQWIRE EMQ.EXTEND key 1 must be active"},
		{[]string{"plain", "@job:J1"}, "EMQWIRE EMQ.EXTEND key 2 must be job:<id>"},
		{[]string{"@active", "^job:J1"}, "EMQWIRE EMQ.EXTEND key 2 must be job:<id>"},
		{[]string{"emq:{}:active", "emq:{}:job:J1"}, "EMQWIRE EMQ.EXTEND key 1 must be active"},
	} {
		if got := expectedKeyError(ext, tc.keys, []string{"J1", "1"}); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.keys, got, tc.want)
		}
	}
	fail := verbByToken("FAIL")
	if got := expectedKeyError(fail, []string{"@active", "@job:J1", "@delayed", "^dead"}, validVals["FAIL"]); got != "EMQWIRE EMQ.FAIL key 4 must be dead" {
		t.Errorf("foreign queue at key 4: %q", got)
	}
}
