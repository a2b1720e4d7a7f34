package table

import (
	"github.com/emqproxy/emqproxy/rewrite"

	"errors"
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	e, err := ParseEntry("7 held scripts-b")
	if err != nil || e != (Entry{Epoch: 7, State: Held, Owner: "scripts-b"}) || e.String() != "7 held scripts-b" {
		t.Fatalf("%+v %v", e, err)
	}
	for in, want := range map[string]string{
		"":                `is not "<epoch> <state> <owner>"`,
		"x held a":        `epoch "x" is not a positive integer`,
		"0 held a":        `epoch "0" is not a positive integer`,
		"3 gone a":        `state "gone" is neither held nor owned`,
		"3 owned a extra": `is not "<epoch> <state> <owner>"`,
	} {
		_, err := ParseEntry(in)
		if !errors.Is(err, ErrTable) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEntry(%q) = %v, want %q", in, err, want)
		}
	}
}

// TestMergeHighestEpochWins: the flip is written on the target first, so
// a proxy that reads the target's newer entry and the source's older hold
// routes to the target.
func TestMergeHighestEpochWins(t *testing.T) {
	src := Table{Epoch: 5, Queues: map[string]Entry{"billing": {5, Held, "scripts-b"}, "old": {2, Owned, "module-a"}}}
	dst := Table{Epoch: 6, Queues: map[string]Entry{"billing": {6, Owned, "module-a"}}}
	m := Merge(src, dst)
	if m.Epoch != 6 || m.Queues["billing"] != (Entry{6, Owned, "module-a"}) || m.Queues["old"].Owner != "module-a" || len(m.Queues) != 2 {
		t.Fatalf("%+v", m)
	}
	if m := Merge(); m.Epoch != 0 || len(m.Queues) != 0 {
		t.Fatalf("%+v", m)
	}
}

// TestMergeBreaksATieAlikeInAnyOrder: two entries of one queue at one
// epoch (not written by a mover: fenced) give the same winner whatever the
// order of the tables: the hold, else the first owner by name.
func TestMergeBreaksATieAlikeInAnyOrder(t *testing.T) {
	for _, tc := range []struct{ a, b, want Entry }{
		{Entry{4, Owned, "scripts-b"}, Entry{4, Held, "module-a"}, Entry{4, Held, "module-a"}},
		{Entry{4, Owned, "scripts-b"}, Entry{4, Owned, "module-a"}, Entry{4, Owned, "module-a"}},
	} {
		ta := Table{Epoch: 4, Queues: map[string]Entry{"q": tc.a}}
		tb := Table{Epoch: 4, Queues: map[string]Entry{"q": tc.b}}
		if got := Merge(ta, tb).Queues["q"]; got != tc.want {
			t.Errorf("Merge(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := Merge(tb, ta).Queues["q"]; got != tc.want {
			t.Errorf("Merge(%v, %v) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestGlobEscape(t *testing.T) {
	if got := rewrite.GlobEscape(`a*b?[c]\d`); got != `a\*b\?\[c\]\\d` {
		t.Fatal(got)
	}
}
