package verify

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Diff is one difference: where, and the two values. For a differential
// case Want is the script side and Got the native side; for a declared
// check Want is the declaration and Got what the server did.
type Diff struct {
	Where string
	Want  string
	Got   string
}

func (d Diff) String() string { return d.Where + ": " + d.Want + " | " + d.Got }

// timeSets are the zsets whose scores are times.
var timeSets = map[string]bool{"active": true, "delayed": true, "done": true, "dead": true}

// timeRef names a time a step wrote: the step's "now" plus an offset.
type timeRef struct {
	Step int
	Off  int64
}

// stamp is a masked score or reply integer: a literal, or the set of step
// times it can be (all inside their windows).
type stamp struct {
	Lit  string
	Refs []timeRef
}

func (s stamp) String() string {
	if s.Refs == nil {
		return s.Lit
	}
	parts := make([]string, len(s.Refs))
	for i, r := range s.Refs {
		parts[i] = fmt.Sprintf("now(step %d)+%d", r.Step+1, r.Off)
	}
	return s.Lit + "=" + strings.Join(parts, "|")
}

// same reports whether two stamps name the same value: equal literals, or
// a common step time.
func (s stamp) same(o stamp) bool {
	if s.Refs == nil || o.Refs == nil {
		return s.Refs == nil && o.Refs == nil && s.Lit == o.Lit
	}
	for _, r := range s.Refs {
		if slices.Contains(o.Refs, r) {
			return true
		}
	}
	return false
}

// stamper masks times against the steps of one side.
type stamper struct {
	steps    []stepResult
	literals map[string]bool // scores written literally by raw setup steps
}

func newStamper(steps []stepResult) stamper {
	st := stamper{steps: steps, literals: map[string]bool{}}
	for _, s := range steps {
		if len(s.Op.Raw) > 0 && strings.EqualFold(s.Op.Raw[0], "ZADD") {
			for _, a := range s.Op.Raw[2:] {
				if f, err := strconv.ParseFloat(a, 64); err == nil {
					st.literals[score(f)] = true
				}
			}
		}
	}
	return st
}

// refs lists the step times (of step only, or of all timed steps when only
// is negative) that v can be. The bounds are compared as doubles, the way
// the zset stores them: past 2^53 a deadline is rounded to the nearest
// double on both sides, and rounding keeps the order.
func (st stamper) refs(v float64, only int) []timeRef {
	var out []timeRef
	for i, s := range st.steps {
		if !s.Timed || (only >= 0 && i != only) {
			continue
		}
		for _, off := range s.Op.offsets() {
			if v >= float64(s.Win.Lo+off) && v <= float64(s.Win.Hi+off) {
				out = append(out, timeRef{i, off})
			}
		}
	}
	return out
}

// maskScore stamps a time-set score; ok is false when the score is neither
// a literal of a raw setup nor inside any step's window.
func (st stamper) maskScore(f float64) (stamp, bool) {
	lit := score(f)
	if st.literals[lit] || f != float64(int64(f)) {
		return stamp{Lit: lit}, st.literals[lit]
	}
	refs := st.refs(f, -1)
	return stamp{Lit: lit, Refs: refs}, refs != nil
}

// maskReply stamps the reply of step i when it is a time (EXTEND's deadline,
// FAIL's run-at); ok is false when it is outside the step's window.
func (st stamper) maskReply(i int) (stamp, bool, bool) {
	s := st.steps[i]
	if !s.Op.timedReply() || s.Reply.Kind != KindInt || s.Reply.Int <= 0 {
		return stamp{}, false, true
	}
	refs := st.refs(float64(s.Reply.Int), i)
	return stamp{Lit: strconv.FormatInt(s.Reply.Int, 10), Refs: refs}, true, refs != nil
}

// masked is one side's state with its times stamped.
type masked struct {
	snap   Snapshot
	scores map[string]map[string]stamp // key -> member -> stamp (time sets)
}

// maskSide stamps every time-set score of snap and removes lease_epoch
// after checking it: on the native side every row the side leased must
// hold runID and no other row may hold it; the script side never writes it.
func maskSide(s side, snap Snapshot, steps []stepResult, runID string) (masked, []Diff) {
	st := newStamper(steps)
	out := masked{snap: snap.clone(), scores: map[string]map[string]stamp{}}
	var diffs []Diff
	leased := leasedIDs(steps)
	for _, key := range out.snap.sortedKeys() {
		v := out.snap[key]
		rest, _ := strings.CutPrefix(key, "emq:{Q}:")
		if v.Type == "zset" && timeSets[rest] {
			m := map[string]stamp{}
			for _, mem := range v.Members {
				sp, ok := st.maskScore(mem.Score)
				if !ok {
					diffs = append(diffs, Diff{
						Where: fmt.Sprintf("%s side, key %s member %s", s, key, mem.Name),
						Want:  "a time inside its call's window (TIME before .. TIME after, plus the lease/backoff)",
						Got:   "score " + score(mem.Score),
					})
				}
				m[mem.Name] = sp
			}
			out.scores[key] = m
		}
		if id, ok := strings.CutPrefix(rest, "job:"); ok && v.Type == "hash" {
			epoch, has := v.Hash["lease_epoch"]
			switch {
			case s == scriptSide && has:
				diffs = append(diffs, Diff{Where: "script side, key " + key + " field lease_epoch", Want: "(absent: scripts never write it)", Got: strconv.Quote(epoch)})
			case s == nativeSide && leased[id] && epoch != runID:
				diffs = append(diffs, Diff{Where: "native side, key " + key + " field lease_epoch", Want: "run_id " + strconv.Quote(runID), Got: fieldText(epoch, has)})
			case s == nativeSide && !leased[id] && has:
				diffs = append(diffs, Diff{Where: "native side, key " + key + " field lease_epoch", Want: "(absent: the native side never leased this row)", Got: strconv.Quote(epoch)})
			}
			delete(v.Hash, "lease_epoch")
		}
	}
	return out, diffs
}

func fieldText(v string, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return strconv.Quote(v)
}

// leasedIDs are the ids whose rows the side's steps leased (CLAIM's id,
// EXTEND's id when it extended) and did not unlease since (REQUEUE, or
// REMOVE deleting the row).
func leasedIDs(steps []stepResult) map[string]bool {
	out := map[string]bool{}
	for _, s := range steps {
		r := s.Reply
		switch s.Op.Token {
		case "CLAIM":
			if r.Kind == KindArray && len(r.Elems) > 0 {
				out[r.Elems[0].Str] = true
			}
		case "EXTEND":
			if r.Kind == KindInt && r.Int > 0 {
				out[s.Op.Vals[0]] = true
			}
		case "REQUEUE", "REMOVE":
			if r.Kind == KindInt && r.Int == 1 {
				delete(out, s.Op.Vals[0])
			}
		}
	}
	return out
}

// unionKeys returns the keys of a and b, each once, in order.
func unionKeys[V any](a, b map[string]V) []string {
	keys := slices.Sorted(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// compareSnapshots compares two masked states key by key.
func compareSnapshots(a, b masked) []Diff {
	var diffs []Diff
	for _, k := range unionKeys(a.snap, b.snap) {
		va, oka := a.snap[k]
		vb, okb := b.snap[k]
		switch {
		case !oka:
			diffs = append(diffs, Diff{Where: "key " + k, Want: "(absent)", Got: vb.String()})
		case !okb:
			diffs = append(diffs, Diff{Where: "key " + k, Want: va.String(), Got: "(absent)"})
		case va.Type != vb.Type:
			diffs = append(diffs, Diff{Where: "key " + k + " type", Want: va.String(), Got: vb.String()})
		default:
			diffs = append(diffs, compareValue(k, va, vb, a.scores[k], b.scores[k])...)
		}
	}
	return diffs
}

func compareValue(k string, va, vb Value, sa, sb map[string]stamp) []Diff {
	var diffs []Diff
	switch va.Type {
	case "hash":
		for _, f := range unionKeys(va.Hash, vb.Hash) {
			x, okx := va.Hash[f]
			y, oky := vb.Hash[f]
			if okx != oky || x != y {
				diffs = append(diffs, Diff{Where: "key " + k + " field " + f, Want: fieldText(x, okx), Got: fieldText(y, oky)})
			}
		}
	case "zset":
		names := func(v Value) []string {
			out := make([]string, len(v.Members))
			for i, m := range v.Members {
				out[i] = m.Name
			}
			return out
		}
		if !slices.Equal(names(va), names(vb)) {
			return []Diff{{Where: "key " + k + " members", Want: va.String(), Got: vb.String()}}
		}
		for i, m := range va.Members {
			x, y := stamp{Lit: score(m.Score)}, stamp{Lit: score(vb.Members[i].Score)}
			if sa != nil {
				x = sa[m.Name]
			}
			if sb != nil {
				y = sb[m.Name]
			}
			if !x.same(y) {
				diffs = append(diffs, Diff{Where: "key " + k + " member " + m.Name + " score", Want: x.String(), Got: y.String()})
			}
		}
	case "string":
		if va.Str != vb.Str {
			diffs = append(diffs, Diff{Where: "key " + k, Want: va.String(), Got: vb.String()})
		}
	default:
		if !slices.Equal(va.Items, vb.Items) {
			diffs = append(diffs, Diff{Where: "key " + k, Want: va.String(), Got: vb.String()})
		}
	}
	return diffs
}

// compareExact compares two states without masking (same side before and
// after, or a declared expectation against the server).
func compareExact(want, got Snapshot) []Diff {
	return compareSnapshots(masked{snap: want}, masked{snap: got})
}

// compareReplies compares the replies of step i on both sides, stamping
// times.
func compareReplies(where string, i int, a, b []stepResult) []Diff {
	ra, rb := a[i].Reply, b[i].Reply
	var diffs []Diff
	ma, timedA, okA := newStamper(a).maskReply(i)
	mb, timedB, okB := newStamper(b).maskReply(i)
	if !okA {
		diffs = append(diffs, Diff{Where: "script side, " + where, Want: "a time inside the call's window", Got: ra.String()})
	}
	if !okB {
		diffs = append(diffs, Diff{Where: "native side, " + where, Want: "a time inside the call's window", Got: rb.String()})
	}
	if timedA && timedB {
		if !ma.same(mb) {
			diffs = append(diffs, Diff{Where: where, Want: ma.String(), Got: mb.String()})
		}
		return diffs
	}
	if !ra.Equal(rb) {
		diffs = append(diffs, Diff{Where: where, Want: ra.String(), Got: rb.String()})
	}
	return diffs
}
