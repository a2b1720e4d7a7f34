package verify

import (
	"fmt"
	"maps"
	"slices"
	"sort"
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

// timeRef names a time a step wrote: the step's "now" plus an offset. It
// covers the steps Step..Last that wrote with that offset and whose windows
// all hold the time (one step, unless several calls shared a millisecond).
type timeRef struct {
	Step int
	Last int
	Off  int64
}

// overlaps reports whether two refs name a common step time.
func (r timeRef) overlaps(o timeRef) bool {
	return r.Off == o.Off && r.Step <= o.Last && o.Step <= r.Last
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
		if r.Last != r.Step {
			parts[i] = fmt.Sprintf("now(step %d..%d)+%d", r.Step+1, r.Last+1, r.Off)
		} else {
			parts[i] = fmt.Sprintf("now(step %d)+%d", r.Step+1, r.Off)
		}
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
		for _, q := range o.Refs {
			if r.overlaps(q) {
				return true
			}
		}
	}
	return false
}

// stamper masks times against the steps of one side.
type stamper struct {
	steps    []stepResult
	literals map[string]bool // scores written literally by raw setup steps
	offs     []int64         // the offsets the timed steps write, in order
	byOff    map[int64]*offIndex
}

// offIndex lists the timed steps that write one offset, with their
// windows. When the windows never go back (the steps ran one after the
// other), the steps whose window holds a time are a run found by binary
// search: a replay of many calls is masked in O(log n) per score.
type offIndex struct {
	steps  []int
	lo, hi []int64
	mono   bool
}

func newStamper(steps []stepResult) stamper {
	st := stamper{steps: steps, literals: map[string]bool{}, byOff: map[int64]*offIndex{}}
	for i, s := range steps {
		if len(s.Op.Raw) > 0 && strings.EqualFold(s.Op.Raw[0], "ZADD") {
			for _, a := range s.Op.Raw[2:] {
				if f, err := strconv.ParseFloat(a, 64); err == nil {
					st.literals[score(f)] = true
				}
			}
		}
		if !s.Timed {
			continue
		}
		for _, off := range s.Op.offsets() {
			ix := st.byOff[off]
			if ix == nil {
				ix = &offIndex{mono: true}
				st.byOff[off] = ix
				st.offs = append(st.offs, off)
			}
			if n := len(ix.lo); n > 0 && (s.Win.Lo < ix.lo[n-1] || s.Win.Hi < ix.hi[n-1]) {
				ix.mono = false
			}
			ix.steps = append(ix.steps, i)
			ix.lo = append(ix.lo, s.Win.Lo)
			ix.hi = append(ix.hi, s.Win.Hi)
		}
	}
	slices.Sort(st.offs)
	return st
}

// refs lists the step times (of step only, or of all timed steps when only
// is negative) that v can be. The bounds are compared as doubles, the way
// the zset stores them: past 2^53 a deadline is rounded to the nearest
// double on both sides, and rounding keeps the order.
func (st stamper) refs(v float64, only int) []timeRef {
	in := func(lo, hi, off int64) bool { return v >= float64(lo+off) && v <= float64(hi+off) }
	var out []timeRef
	if only >= 0 {
		s := st.steps[only]
		if s.Timed {
			for _, off := range s.Op.offsets() {
				if in(s.Win.Lo, s.Win.Hi, off) {
					out = append(out, timeRef{only, only, off})
				}
			}
		}
		return out
	}
	for _, off := range st.offs {
		ix := st.byOff[off]
		if !ix.mono {
			for k, i := range ix.steps {
				if in(ix.lo[k], ix.hi[k], off) {
					out = append(out, timeRef{i, i, off})
				}
			}
			continue
		}
		first := sort.Search(len(ix.hi), func(k int) bool { return float64(ix.hi[k]+off) >= v })
		last := sort.Search(len(ix.lo), func(k int) bool { return float64(ix.lo[k]+off) > v }) - 1
		if first <= last {
			out = append(out, timeRef{ix.steps[first], ix.steps[last], off})
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
		na, nb := names(va), names(vb)
		if sa != nil || sb != nil {
			// A time set: its order follows the times, which differ
			// between the sides within their windows; compare members as
			// a set, each score by its stamp.
			slices.Sort(na)
			slices.Sort(nb)
		}
		if !slices.Equal(na, nb) {
			return []Diff{{Where: "key " + k + " members", Want: va.String(), Got: vb.String()}}
		}
		scoreB := make(map[string]float64, len(vb.Members))
		for _, m := range vb.Members {
			scoreB[m.Name] = m.Score
		}
		for _, m := range va.Members {
			x, y := stamp{Lit: score(m.Score)}, stamp{Lit: score(scoreB[m.Name])}
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
