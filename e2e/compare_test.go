package e2e

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"
)

// claimCall is a recorded claim of id with a lease.
func claimCall(id string, lease string) legacy.Call {
	return legacy.Call{
		Op:    legacy.ScriptClaim,
		Line:  []string{"EVALSHA", "sha", "2", "emq:{q}:pending", "emq:{q}:active", lease},
		Reply: legacy.Value{Kind: legacy.KindArray, Array: []legacy.Value{{Kind: legacy.KindString, Str: id}, {Kind: legacy.KindString, Str: "p"}, {Kind: legacy.KindInt, Int: 1}}},
	}
}

// run builds a finished transcript of one claim step in [lo, hi] and the
// keys it left.
func run(p *Path, lo, hi int64, keys Snapshot) *Transcript {
	return &Transcript{
		Path:        p,
		steps:       []Step{{Name: "claim", Lo: lo, Hi: hi, Calls: []legacy.Call{claimCall("A", "1000")}}},
		checkpoints: []Checkpoint{{Name: "end", After: 0, Keys: keys}},
	}
}

func claimed(score int64, epoch string) Snapshot {
	r := row("active", "1", "p")
	if epoch != "" {
		r.Hash[LeaseEpoch] = epoch
	}
	return Snapshot{"emq:{q}:job:A": r, "emq:{q}:active": zset(Member{"A", score})}
}

func TestCompareMasksLeaseScoresAndEpoch(t *testing.T) {
	scripts := &Path{Name: ScriptsPath}
	proxied := &Path{Name: ProxyPath, RunID: "abc"}
	// Different instants, each inside its own window plus the lease: equal.
	a := run(scripts, 100, 105, claimed(1103, ""))
	b := run(proxied, 500, 502, claimed(1500, "abc"))
	if d := Compare(a, b); len(d) != 0 {
		t.Fatalf("want no difference, got\n%s", FormatDiffs(ScriptsPath, ProxyPath, d))
	}
}

func TestCompareReportsEachDifference(t *testing.T) {
	scripts := &Path{Name: ScriptsPath}
	proxied := &Path{Name: ProxyPath, RunID: "abc"}
	cases := []struct {
		name   string
		a, b   *Transcript
		report string
	}{
		{"score outside the window", run(scripts, 100, 105, claimed(1103, "")), run(proxied, 500, 502, claimed(1503, "abc")),
			"key emq:{q}:active member A"},
		{"lease_epoch missing on a leased row", run(scripts, 100, 105, claimed(1103, "")), run(proxied, 500, 502, claimed(1500, "")),
			"field lease_epoch"},
		{"lease_epoch of another server", run(scripts, 100, 105, claimed(1103, "")), run(proxied, 500, 502, claimed(1500, "xyz")),
			"the module node's run_id \"abc\""},
		{"lease_epoch on the scripts side", run(scripts, 100, 105, claimed(1103, "abc")), run(proxied, 500, 502, claimed(1500, "abc")),
			"the scripts never write it"},
		{"a field differs", run(scripts, 100, 105, claimed(1103, "")), func() *Transcript {
			s := claimed(1500, "abc")
			s["emq:{q}:job:A"].Hash["attempts"] = "2"
			return run(proxied, 500, 502, s)
		}(), "field attempts"},
		{"a key is missing", run(scripts, 100, 105, claimed(1103, "")), func() *Transcript {
			s := claimed(1500, "abc")
			delete(s, "emq:{q}:active")
			return run(proxied, 500, 502, s)
		}(), "key emq:{q}:active"},
		{"a reply differs", run(scripts, 100, 105, claimed(1103, "")), func() *Transcript {
			tr := run(proxied, 500, 502, claimed(1500, "abc"))
			tr.steps[0].Calls[0].Reply.Array[2].Int = 2
			return tr
		}(), "call 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Compare(c.a, c.b)
			text := FormatDiffs(ScriptsPath, ProxyPath, d)
			if len(d) == 0 || !strings.Contains(text, c.report) {
				t.Fatalf("want a difference mentioning %q, got\n%s", c.report, text)
			}
		})
	}
}

func TestCompareTogetherStepsIgnoreOrder(t *testing.T) {
	scripts := &Path{Name: ScriptsPath}
	proxied := &Path{Name: ProxyPath, RunID: "abc"}
	x, y := claimCall("A", "1000"), claimCall("B", "1000")
	a := &Transcript{Path: scripts, steps: []Step{{Name: "s", Together: true, Calls: []legacy.Call{x, y}}}}
	b := &Transcript{Path: proxied, steps: []Step{{Name: "s", Together: true, Calls: []legacy.Call{y, x}}}}
	if d := Compare(a, b); len(d) != 0 {
		t.Fatalf("want no difference, got\n%s", FormatDiffs(ScriptsPath, ProxyPath, d))
	}
	b.steps[0].Calls = []legacy.Call{y, y}
	if d := Compare(a, b); len(d) == 0 {
		t.Fatal("a changed multiset went unnoticed")
	}
}
