package keycopy

import (
	"strings"
	"testing"
	"time"
)

// TestHoldPlan: a hold is planned only when the large keys' comparisons
// fit within --max-hold and, with them, twice the changed small keys' copy
// at the measured rate does; the plan says which part does not fit.
func TestHoldPlan(t *testing.T) {
	const maxHold = time.Second
	for _, tc := range []struct {
		name       string
		p          holdPlan
		fits, over bool // over: the small keys keep it from fitting
		says       string
	}{
		{"nothing left", holdPlan{}, true, false, "no changed small key left"},
		{"a short tail", holdPlan{small: 1000, Rate: 50000, smallTime: 20 * time.Millisecond}, true, false, "1000 changed keys to copy in about 20ms at 50000 keys/s"},
		{"a tail of half the hold", holdPlan{small: 30000, Rate: 50000, smallTime: 600 * time.Millisecond}, false, true, "30000 changed keys"},
		{"not measured", holdPlan{small: 10, smallTime: CutHold}, false, true, "at a rate not measured yet"},
		{"large keys too slow", holdPlan{Large: 2 * time.Second, LargeKeys: []string{"k"}}, false, false, "1 large keys to compare whole in about 2s"},
		{"a large key cut before", holdPlan{Large: CutHold, LargeKeys: []string{"k"}}, false, false, "one was cut by a previous hold"},
		{"both, the small keys over", holdPlan{small: 100, Rate: 1000, smallTime: 100 * time.Millisecond, Large: 900 * time.Millisecond, LargeKeys: []string{"k"}}, false, true, "and 1 large keys"},
	} {
		if got := tc.p.Fits(maxHold); got != tc.fits {
			t.Errorf("%s: fits %v, want %v", tc.name, got, tc.fits)
		}
		if got := tc.p.SmallOver(maxHold); got != tc.over {
			t.Errorf("%s: the small keys over %v, want %v", tc.name, got, tc.over)
		}
		if got := tc.p.Work(); !strings.Contains(got, tc.says) {
			t.Errorf("%s: says %q, want %q in it", tc.name, got, tc.says)
		}
	}
}

// TestTailRate: the rate of the changed keys' copies is measured over all
// of them, once they are enough to time.
func TestTailRate(t *testing.T) {
	s := newCopyStats()
	s.MeasureTail(100, 10*time.Millisecond)
	if r := s.tailRate(); r != 0 {
		t.Errorf("100 keys measured: rate %v, want none yet", r)
	}
	s.MeasureTail(900, 10*time.Millisecond)
	if r := s.tailRate(); r < 49000 || r > 51000 {
		t.Errorf("1000 keys in 20ms: rate %v, want 50000", r)
	}
}
