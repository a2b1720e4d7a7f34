package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/emqproxy/emqproxy/stand/legacy"
)

// Diff is one difference between two runs of a scenario: where, and what
// each run (A the first transcript, B the second) shows there.
type Diff struct {
	Where string
	A, B  string
}

// LeaseEpoch is the field the module's CLAIM and EXTEND add to a row (a
// declared delta): the server's run_id.
const LeaseEpoch = "lease_epoch"

// timeSets are the zsets whose scores are server times (plus a lease or a
// backoff): the last segment of their key name.
var timeSets = map[string]bool{"active": true, "delayed": true, "done": true, "dead": true}

// Compare holds two runs of one scenario to each other: the same steps;
// in each step the same replies (in order, or as a multiset for a Together
// step), a time reply matched to its step's window; and at each checkpoint
// the same keys, with time scores matched to the windows of the steps
// before it and lease_epoch checked (see maskRows) and masked.
func Compare(a, b *Transcript) []Diff {
	sa, sb := a.Steps(), b.Steps()
	var diffs []Diff
	if na, nb := stepNames(sa), stepNames(sb); !slices.Equal(na, nb) {
		return []Diff{{Where: "steps", A: strings.Join(na, ", "), B: strings.Join(nb, ", ")}}
	}
	for i := range sa {
		diffs = append(diffs, compareStep(i, sa[i], sb[i])...)
	}
	ca, cb := a.Checkpoints(), b.Checkpoints()
	if len(ca) != len(cb) {
		return append(diffs, Diff{Where: "checkpoints", A: strconv.Itoa(len(ca)), B: strconv.Itoa(len(cb))})
	}
	for i := range ca {
		where := fmt.Sprintf("keys after %q", ca[i].Name)
		ma, da := maskKeys(where, a.Path, sa[:ca[i].After+1], ca[i].Keys)
		mb, db := maskKeys(where, b.Path, sb[:cb[i].After+1], cb[i].Keys)
		diffs = append(diffs, da...)
		diffs = append(diffs, db...)
		diffs = append(diffs, compareKeys(where, ma, mb)...)
	}
	return diffs
}

// FormatDiffs renders diffs key by key, naming the two paths.
func FormatDiffs(a, b string, diffs []Diff) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d difference(s) between the %s path and the %s path:\n", len(diffs), a, b)
	w := max(len(a), len(b)) + 1
	for _, d := range diffs {
		fmt.Fprintf(&sb, "  %s\n      %-*s %s\n      %-*s %s\n", d.Where, w, a+":", d.A, w, b+":", d.B)
	}
	return sb.String()
}

func stepNames(ss []Step) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

// compareStep compares the replies of one step.
func compareStep(i int, a, b Step) []Diff {
	where := fmt.Sprintf("step %d %q", i, a.Name)
	var diffs []Diff
	ra, da := renderCalls(where, a)
	rb, db := renderCalls(where, b)
	diffs = append(append(diffs, da...), db...)
	if a.Together {
		ca, cb := counts(ra), counts(rb)
		for _, k := range slices.Sorted(maps.Keys(ca)) {
			if ca[k] != cb[k] {
				diffs = append(diffs, Diff{Where: where + " (calls in any order)", A: fmt.Sprintf("%d× %s", ca[k], k), B: fmt.Sprintf("%d×", cb[k])})
			}
		}
		for _, k := range slices.Sorted(maps.Keys(cb)) {
			if _, ok := ca[k]; !ok {
				diffs = append(diffs, Diff{Where: where + " (calls in any order)", A: "0×", B: fmt.Sprintf("%d× %s", cb[k], k)})
			}
		}
		return diffs
	}
	for j := range max(len(ra), len(rb)) {
		x, y := "(no call)", "(no call)"
		if j < len(ra) {
			x = ra[j]
		}
		if j < len(rb) {
			y = rb[j]
		}
		if x != y {
			diffs = append(diffs, Diff{Where: fmt.Sprintf("%s call %d", where, j), A: x, B: y})
		}
	}
	return diffs
}

func counts(ss []string) map[string]int {
	out := map[string]int{}
	for _, s := range ss {
		out[s]++
	}
	return out
}

// renderCalls renders each call as "op: line → reply", a time reply
// (EXTEND's deadline, FAIL's run-at) as now+<offset> once it is checked
// against the step's window.
func renderCalls(where string, s Step) ([]string, []Diff) {
	out := make([]string, len(s.Calls))
	var diffs []Diff
	for i, c := range s.Calls {
		reply := c.Reply.String()
		if off, ok := timedReply(c); ok {
			if at := c.Reply.Int - off; at < s.Lo || at > s.Hi {
				diffs = append(diffs, Diff{Where: fmt.Sprintf("%s call %d: %s", where, i, c.Op),
					A: fmt.Sprintf("a time in [%d, %d] + %d", s.Lo, s.Hi, off), B: reply})
			} else {
				reply = "now+" + strconv.FormatInt(off, 10)
			}
		}
		out[i] = c.Op + ": " + strings.Join(c.Line, " ") + " → " + reply
	}
	return out, diffs
}

// timedReply reports whether a call's reply is a time, and the offset
// (lease or backoff) added to "now".
func timedReply(c legacy.Call) (int64, bool) {
	if c.Reply.Kind != legacy.KindInt || c.Reply.Int <= 0 || len(c.Line) == 0 {
		return 0, false
	}
	switch c.Op {
	case legacy.ScriptExtend, legacy.ScriptFail:
		off, err := strconv.ParseInt(c.Line[len(c.Line)-1], 10, 64)
		return off, err == nil
	}
	return 0, false
}

// offsets lists what a step's calls may add to "now" in a score: 0, and
// each lease and backoff they sent.
func offsets(s Step) []int64 {
	out := []int64{0}
	for _, c := range s.Calls {
		switch c.Op {
		case legacy.ScriptClaim, legacy.ScriptExtend, legacy.ScriptFail:
			if n, err := strconv.ParseInt(c.Line[len(c.Line)-1], 10, 64); err == nil && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// stampRef is one step time a score can be: step's now plus an offset.
type stampRef struct {
	Step int
	Off  int64
}

// maskedKey is a key with its time scores replaced by the step times they
// can be.
type maskedKey struct {
	Key
	stamps map[string][]stampRef // member -> candidates (time sets only)
}

// maskKeys stamps the time scores of a snapshot with the steps before it
// and checks then masks lease_epoch.
func maskKeys(where string, p *Path, steps []Step, snap Snapshot) (map[string]maskedKey, []Diff) {
	offs := make([][]int64, len(steps))
	for i, s := range steps {
		offs[i] = offsets(s)
	}
	leased := leasedRows(steps)
	out := make(map[string]maskedKey, len(snap))
	var diffs []Diff
	for _, name := range snap.Names() {
		k := snap[name]
		mk := maskedKey{Key: k}
		if k.Type == "zset" && timeSets[name[strings.LastIndexByte(name, ':')+1:]] {
			mk.stamps = map[string][]stampRef{}
			for _, m := range k.Members {
				refs := candidates(m.Score, steps, offs)
				if refs == nil {
					diffs = append(diffs, Diff{Where: fmt.Sprintf("%s, %s path, key %s member %s", where, p.Name, name, m.Name),
						A: "a time inside the window of a step before it (plus its lease/backoff)", B: "score " + strconv.FormatInt(m.Score, 10)})
				}
				mk.stamps[m.Name] = refs
			}
		}
		if k.Type == "hash" && strings.Contains(name, "}:job:") {
			mk.Hash = maps.Clone(k.Hash)
			diffs = append(diffs, checkEpoch(where, p, name, leased[name], mk.Hash)...)
			delete(mk.Hash, LeaseEpoch)
		}
		out[name] = mk
	}
	return out, diffs
}

// checkEpoch holds a row to the lease_epoch delta: the scripts never write
// it; the module writes the run_id on every row a CLAIM or EXTEND leased
// (and only REQUEUE, which the legacy client never sends, removes it).
func checkEpoch(where string, p *Path, name string, leased bool, h map[string]string) []Diff {
	v, has := h[LeaseEpoch]
	d := Diff{Where: fmt.Sprintf("%s, %s path, key %s field %s", where, p.Name, name, LeaseEpoch), B: fieldText(v, has)}
	switch {
	case p.RunID == "" && has:
		d.A = "(absent: the scripts never write it)"
	case p.RunID != "" && leased && v != p.RunID:
		d.A = "the module node's run_id " + strconv.Quote(p.RunID)
	case p.RunID != "" && !leased && has:
		d.A = "(absent: the client never leased this row)"
	default:
		return nil
	}
	return []Diff{d}
}

func fieldText(v string, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return strconv.Quote(v)
}

// leasedRows are the row keys the steps' claims and extends leased, less
// the rows a remove deleted since.
func leasedRows(steps []Step) map[string]bool {
	out := map[string]bool{}
	for _, s := range steps {
		for _, c := range s.Calls {
			keys, _, ok := split(c.Line)
			if !ok {
				continue
			}
			r := c.Reply
			switch c.Op {
			case legacy.ScriptClaim:
				if r.Kind == legacy.KindArray && len(r.Array) > 0 && len(keys) > 0 {
					prefix := keys[0][:strings.LastIndexByte(keys[0], ':')+1]
					out[prefix+"job:"+r.Array[0].Str] = true
				}
			case legacy.ScriptExtend:
				if r.Kind == legacy.KindInt && r.Int > 0 && len(keys) > 1 {
					out[keys[1]] = true
				}
			case legacy.ScriptRemove:
				if r.Kind == legacy.KindInt && r.Int == 1 && len(keys) > 0 {
					delete(out, keys[0])
				}
			}
		}
	}
	return out
}

// split cuts a script line (EVALSHA sha numkeys keys... vals...) into its
// keys and values.
func split(line []string) (keys, vals []string, ok bool) {
	if len(line) < 3 || !strings.HasPrefix(line[0], "EVALSHA") {
		return nil, nil, false
	}
	n, err := strconv.Atoi(line[2])
	if err != nil || n < 0 || 3+n > len(line) {
		return nil, nil, false
	}
	return line[3 : 3+n], line[3+n:], true
}

// candidates lists the step times a score can be.
func candidates(score int64, steps []Step, offs [][]int64) []stampRef {
	var out []stampRef
	for i, s := range steps {
		for _, off := range offs[i] {
			if score >= s.Lo+off && score <= s.Hi+off {
				out = append(out, stampRef{i, off})
			}
		}
	}
	return out
}

func stampText(score int64, refs []stampRef) string {
	if len(refs) == 0 {
		return strconv.FormatInt(score, 10) + " (in no window)"
	}
	parts := make([]string, len(refs))
	for i, r := range refs {
		parts[i] = fmt.Sprintf("now(step %d)+%d", r.Step, r.Off)
	}
	return strconv.FormatInt(score, 10) + " = " + strings.Join(parts, " | ")
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

// compareKeys compares two masked snapshots key by key.
func compareKeys(where string, a, b map[string]maskedKey) []Diff {
	var diffs []Diff
	for _, n := range unionKeys(a, b) {
		ka, oka := a[n]
		kb, okb := b[n]
		at := where + ", key " + n
		switch {
		case !oka:
			diffs = append(diffs, Diff{Where: at, A: "(absent)", B: kb.String()})
		case !okb:
			diffs = append(diffs, Diff{Where: at, A: ka.String(), B: "(absent)"})
		case ka.Type != kb.Type:
			diffs = append(diffs, Diff{Where: at + " type", A: ka.Type, B: kb.Type})
		case ka.Type == "hash":
			diffs = append(diffs, compareHash(at, ka.Hash, kb.Hash)...)
		case ka.Type == "zset":
			diffs = append(diffs, compareZset(at, ka, kb)...)
		case ka.String() != kb.String():
			diffs = append(diffs, Diff{Where: at, A: ka.String(), B: kb.String()})
		}
	}
	return diffs
}

func compareHash(at string, a, b map[string]string) []Diff {
	var diffs []Diff
	for _, f := range unionKeys(a, b) {
		x, okx := a[f]
		y, oky := b[f]
		if okx != oky || x != y {
			diffs = append(diffs, Diff{Where: at + " field " + f, A: fieldText(x, okx), B: fieldText(y, oky)})
		}
	}
	return diffs
}

// compareZset compares members by name; scores of a time set must share a
// step time, other scores must be equal.
func compareZset(at string, a, b maskedKey) []Diff {
	ma := make(map[string]int64, len(a.Members))
	for _, m := range a.Members {
		ma[m.Name] = m.Score
	}
	mb := make(map[string]int64, len(b.Members))
	for _, m := range b.Members {
		mb[m.Name] = m.Score
	}
	var diffs []Diff
	for _, n := range slices.Sorted(maps.Keys(ma)) {
		if _, ok := mb[n]; !ok {
			diffs = append(diffs, Diff{Where: at + " member " + n, A: "score " + strconv.FormatInt(ma[n], 10), B: "(absent)"})
		}
	}
	for _, n := range slices.Sorted(maps.Keys(mb)) {
		x, ok := ma[n]
		y := mb[n]
		switch {
		case !ok:
			diffs = append(diffs, Diff{Where: at + " member " + n, A: "(absent)", B: "score " + strconv.FormatInt(y, 10)})
		case a.stamps == nil || b.stamps == nil:
			if x != y {
				diffs = append(diffs, Diff{Where: at + " member " + n + " score", A: strconv.FormatInt(x, 10), B: strconv.FormatInt(y, 10)})
			}
		case !shareRef(a.stamps[n], b.stamps[n]):
			diffs = append(diffs, Diff{Where: at + " member " + n + " score",
				A: stampText(x, a.stamps[n]), B: stampText(y, b.stamps[n])})
		}
	}
	return diffs
}

func shareRef(a, b []stampRef) bool {
	for _, r := range a {
		if slices.Contains(b, r) {
			return true
		}
	}
	return false
}
