package verify

import (
	"fmt"
	"strconv"
	"strings"
)

// The error cases: shape (key count, value count), each value position,
// the row key (differential: the scripts implement these checks with the
// same texts), and the native-only layout and brand fence checks.

// validVals are well-formed values for each verb, job id J1.
var validVals = map[string][]string{
	"ENQUEUE":    {"J1", "p"},
	"CLAIM":      {lease},
	"EXTEND":     {"J1", lease2},
	"COMPLETE":   {"J1"},
	"FAIL":       {"J1", "boom", "3", "5000"},
	"RETRY":      {"J1"},
	"CANCEL":     {"J1"},
	"PROMOTE":    {"10"},
	"REAP":       {"10", "3"},
	"PAUSE":      {},
	"RESUME":     {},
	"REMOVE":     {"J1"},
	"RESCHEDULE": {"J1", "5000"},
	"REQUEUE":    {"J1"},
}

// badInts are values that are not decimal integers in [0, 2^53), tried at
// every integer position.
var badInts = []string{"x", "-1", "1.5", ""}

// moreBadInts are tried at CLAIM's lease and FAIL's backoff: forms Lua's
// tonumber or C's strtoll would accept, and the first value past the range.
var moreBadInts = []string{"1e3", " 1", "1 ", "0x10", "+1", "9007199254740992", "99999999999999999999"}

// edgeInts are well-formed integers at the edges of the grammar.
var edgeInts = []string{"0", "9007199254740991", "05"}

// errorSetup leaves J1 active and J2 pending, so a call that slipped past
// its check would change something visible.
func errorSetup() []Op {
	return []Op{enq("J1", "a"), enq("J2", "b"), claim(lease)}
}

// shapeCases are the shape, value and row key cases of one verb. Kind is
// kindDiff for scripted verbs and kindNative for the native-only ones.
func shapeCases(v verbSpec, kind caseKind) []testCase {
	t := v.Token
	vals := validVals[t]
	keys := v.keys("J1")
	var out []testCase
	add := func(name string, op Op, want *Reply) {
		out = append(out, testCase{Token: t, Name: name, Kind: kind, Setup: errorSetup(), Call: op, Want: want})
	}
	k, n := len(keys), len(vals)
	add(fmt.Sprintf("%d keys instead of %d", k-1, k), call(t, keys[:k-1], vals...), rErr(errKeys(t, k, k-1)))
	add(fmt.Sprintf("%d keys instead of %d", k+1, k), call(t, append(append([]string{}, keys...), "@extra"), vals...), rErr(errKeys(t, k, k+1)))
	add("no keys", call(t, nil, vals...), rErr(errKeys(t, k, 0)))
	if n > 0 {
		add(fmt.Sprintf("%d values instead of %d", n-1, n), call(t, keys, vals[:n-1]...), rErr(errVals(t, n, n-1)))
	}
	add(fmt.Sprintf("%d values instead of %d", n+1, n), call(t, keys, append(append([]string{}, vals...), "9")...), rErr(errVals(t, n, n+1)))
	add("wrong key and value counts: keys first", call(t, keys[:k-1], append(append([]string{}, vals...), "9")...), rErr(errKeys(t, k, k-1)))
	for j, kind := range v.Vals {
		if kind != valInt && kind != valLimit {
			continue
		}
		bad := append([]string{}, badInts...)
		if kind == valLimit {
			bad = append(bad, "0")
		}
		if (t == "CLAIM" && j == 0) || (t == "FAIL" && j == 3) || (t == "RESCHEDULE" && j == 1) {
			bad = append(bad, moreBadInts...)
		}
		for _, b := range bad {
			vs := append([]string{}, vals...)
			vs[j] = b
			add(fmt.Sprintf("value %d is %q", j+1, b), call(t, keys, vs...), rErr(errInt(t, j+1)))
		}
	}
	// Two bad values: the first one in argument order is named.
	if ints := intPositions(v); len(ints) >= 2 {
		vs := append([]string{}, vals...)
		vs[ints[0]], vs[ints[1]] = "x", "y"
		add(fmt.Sprintf("values %d and %d bad: first named", ints[0]+1, ints[1]+1), call(t, keys, vs...), rErr(errInt(t, ints[0]+1)))
	}
	if jp := v.jobPos(); jp > 0 {
		ks := append([]string{}, keys...)
		ks[jp-1] = "@job:J2"
		add("row key of another id", call(t, ks, vals...), rErr(errKeyRole(t, jp, rowRoleText)))
		ks = append([]string{}, keys...)
		ks[jp-1] = "^job:J1"
		add("row key of another queue", call(t, ks, vals...), rErr(errKeyRole(t, jp, rowRoleText)))
		ks = append([]string{}, keys...)
		ks[jp-1] = "@job:"
		add("row key without the id", call(t, ks, vals...), rErr(errKeyRole(t, jp, rowRoleText)))
		if len(v.Vals) > 1 {
			vs := append([]string{}, vals...)
			for j, kind := range v.Vals {
				if kind == valInt || kind == valLimit {
					vs[j] = "x"
					break
				}
			}
			if !slicesEqual(vs, vals) {
				ks = append([]string{}, keys...)
				ks[jp-1] = "@job:J2"
				add("bad value and row key: value first", call(t, ks, vs...), rErr(errInt(t, firstInt(v)+1)))
			}
		}
	}
	return out
}

// edgeCases are integer values at the edges of the grammar: accepted by
// the contract, so the call goes through on both sides.
func edgeCases() []testCase {
	var out []testCase
	for _, e := range edgeInts {
		out = append(out,
			testCase{Token: "CLAIM", Name: fmt.Sprintf("lease %q", e), Setup: []Op{enq("J1", "p")}, Call: claim(e)},
			testCase{Token: "PROMOTE", Name: fmt.Sprintf("limit %q", e), Setup: delayedRow("J1", "1000"), Call: promote(e)},
		)
	}
	return out
}

func intPositions(v verbSpec) []int {
	var out []int
	for j, k := range v.Vals {
		if k == valInt || k == valLimit {
			out = append(out, j)
		}
	}
	return out
}

func firstInt(v verbSpec) int {
	if p := intPositions(v); len(p) > 0 {
		return p[0]
	}
	return -1
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// layoutCases are the native-only layout checks of one verb, each judged
// against the text the contract's check order gives (row key first, then
// layout).
func layoutCases(v verbSpec) []testCase {
	t := v.Token
	vals := validVals[t]
	keys := v.keys("J1")
	var out []testCase
	add := func(name string, ks []string) {
		out = append(out, testCase{Token: t, Name: "layout: " + name, Kind: kindNative, Setup: errorSetup(),
			Call: call(t, ks, vals...), Want: rErr(expectedKeyError(v, ks, vals))})
	}
	for i := range keys {
		ks := append([]string{}, keys...)
		ks[i] = "@bogus"
		add(fmt.Sprintf("key %d in no role", i+1), ks)
		ks = append([]string{}, keys...)
		ks[i] = strings.Replace(keys[i], "@", "^", 1)
		if i > 0 {
			add(fmt.Sprintf("key %d of another queue", i+1), ks)
		}
		ks = append([]string{}, keys...)
		ks[i] = "plain"
		add(fmt.Sprintf("key %d not a queue key", i+1), ks)
		ks = append([]string{}, keys...)
		ks[i] = strings.Replace(keys[i], "@", "emq:{}:", 1)
		add(fmt.Sprintf("key %d with an empty queue name", i+1), ks)
	}
	if len(keys) >= 2 && v.Keys[0] != roleJob && v.Keys[1] != roleJob {
		ks := append([]string{}, keys...)
		ks[0], ks[1] = ks[1], ks[0]
		add("keys 1 and 2 swapped", ks)
	}
	return out
}

// expectedKeyError applies the contract's order to a call whose keys are
// wrong: the row key check (P from the first key that is not the row key),
// then the layout check; q stands for any queue.
func expectedKeyError(v verbSpec, ks, vals []string) string {
	q := "Q"
	keys := expandAll(ks, q)
	if jp := v.jobPos(); jp > 0 {
		prefix := ""
		for i, k := range keys {
			if i != jp-1 {
				if c := strings.LastIndexByte(k, ':'); c >= 0 {
					prefix = k[:c+1]
				}
				break
			}
		}
		if keys[jp-1] != prefix+"job:"+vals[0] {
			return errKeyRole(v.Token, jp, rowRoleText)
		}
	}
	first := ""
	for i, k := range keys {
		rest, ok := strings.CutPrefix(k, "emq:{")
		qn, role, ok2 := strings.Cut(rest, "}:")
		good := ok && ok2 && qn != "" && !strings.Contains(qn, "}")
		if i == 0 {
			first = qn
		} else {
			good = good && qn == first
		}
		if v.Keys[i] == roleJob {
			good = good && strings.HasPrefix(role, "job:") && len(role) > len("job:")
		} else {
			good = good && role == v.Keys[i]
		}
		if !good {
			return errKeyRole(v.Token, i+1, v.roleText(i))
		}
	}
	return "(no error expected)"
}

// fenceCalls are well-formed calls of every verb that would write on the
// fence setup (J1 active, J2 dead, J3 pending).
func fenceCalls() map[string]Op {
	return map[string]Op{
		"ENQUEUE": enq("J4", "d"), "CLAIM": claim(lease), "EXTEND": extend("J1", lease2),
		"COMPLETE": complete("J1"), "FAIL": fail("J1", "boom", "3", "5000"), "RETRY": retry("J2"),
		"CANCEL": cancel("J3"), "PROMOTE": promote("10"), "REAP": reap("10", "3"), "PAUSE": pause(),
		"RESUME": resume(), "REMOVE": remove("J3"), "RESCHEDULE": resched("J3", "5000"), "REQUEUE": requeue("J1"),
	}
}

// fenceCases are the native fence's checks of one verb: an absent brand and
// the legacy brand refuse with the declared text, and nothing is written.
func fenceCases(v verbSpec, legacy string) []testCase {
	setup := []Op{enq("J1", "a"), enq("J2", "b"), enq("J3", "c"), claim(lease), claim(lease), fail("J2", "boom", "1", "0")}
	absent := ""
	op := fenceCalls()[v.Token]
	return []testCase{
		{Token: v.Token, Name: "fence: brand absent", Kind: kindNative, Setup: setup, Call: op, Brand: &absent, Want: rErr(errFence("nil"))},
		{Token: v.Token, Name: "fence: brand " + strconv.Quote(legacy), Kind: kindNative, Setup: setup, Call: op, Brand: &legacy, Want: rErr(errFence(legacy))},
	}
}
