package verify

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// caseKind says how a case is judged.
type caseKind int

const (
	// kindDiff runs on both sides and compares them.
	kindDiff caseKind = iota
	// kindPaused is CLAIM on a paused queue: both sides run, the states are
	// compared, and the replies are judged against the declarations (the
	// host skips the script; the native verb replies []).
	kindPaused
	// kindNative runs on the native side only and is judged against the
	// contract: layout, fence, RESCHEDULE, REQUEUE.
	kindNative
)

// testCase is one case of the harness.
type testCase struct {
	Token string // the report row: a job-core token or a read name
	Name  string
	Kind  caseKind
	Setup []Op
	Call  Op
	// Want is the reply the contract gives, checked on every side that runs
	// (nil: no declaration beyond the comparison).
	Want *Reply
	// Expect gives the state the contract leaves after the call from the
	// state before it (kindNative; nil: unchanged).
	Expect func(before Snapshot) Snapshot
	// Exact makes it a lease-exact case: script, command and TIME in one
	// MULTI/EXEC.
	Exact bool
	// AtNow (lease-exact cases only) runs inside that transaction, before
	// the two calls, on each side's queue: a setup that must read the same
	// time as the calls, such as a score equal to now, the boundary the
	// verbs' due checks turn on. Only a cached clock makes that time one
	// value, so without it such a case is not run (reported skipped).
	AtNow []Op
	// Brand, when set, is put in place of the brand for the call ("" =
	// absent) and restored afterwards (fence cases, kindNative).
	Brand *string
}

// Status is the outcome of one case.
type Status int

// The outcomes.
const (
	Equal     Status = iota // both sides (or the declaration and the server) agree
	Differing               // at least one difference
	Skipped                 // ran, agreed, but the check it exists for could not be made here
)

// CaseResult is the outcome of one case.
type CaseResult struct {
	Token    string
	Name     string
	Declared bool // judged against the contract rather than against the script
	Exact    bool // a lease-exact case
	Status   Status
	Reason   string // why it was skipped
	Diffs    []Diff
}

// sideRun is what one side did in one case.
type sideRun struct {
	Q      string
	Steps  []stepResult // setup steps, then the call (last)
	Before Snapshot     // state before the call
	After  Snapshot
}

func (r sideRun) call() stepResult { return r.Steps[len(r.Steps)-1] }

// harness carries what the cases need.
type harness struct {
	ex          *executor
	runID       string
	cachedClock bool
	version     string
	tag         string // queue name tag, "" on an empty keyspace
	n           int
	queues      []string // every queue a case used
	queueKeys   int      // keys under those queues after their cases
}

// queue names the next pair of queues.
func (h *harness) nextQueues() (string, string) {
	h.n++
	a := "v" + h.tag + "A" + strconv.Itoa(h.n)
	b := "v" + h.tag + "B" + strconv.Itoa(h.n)
	h.queues = append(h.queues, a, b)
	return a, b
}

// setup runs the setup steps of a case for side s on q and reads the state.
func (h *harness) setup(ctx context.Context, s side, q string, tc testCase) (sideRun, error) {
	run := sideRun{Q: q}
	start, err := snapshotQueue(ctx, h.ex.c, q)
	if err != nil {
		return run, err
	}
	if len(start) != 0 {
		return run, fmt.Errorf("%w: queue %s is not empty before its case", ErrServer, q)
	}
	for _, op := range tc.Setup {
		res, err := h.ex.run(ctx, s, q, op)
		if err != nil {
			return run, err
		}
		if op.Raw == nil {
			if res.After, err = snapshotQueue(ctx, h.ex.c, q); err != nil {
				return run, err
			}
		}
		run.Steps = append(run.Steps, res)
	}
	run.Before, err = snapshotQueue(ctx, h.ex.c, q)
	return run, err
}

// runCase runs one case and judges it. When a setup step already left the
// two sides apart, the case is not judged; the divergence is returned as a
// second result, booked under the token of that step.
func (h *harness) runCase(ctx context.Context, tc testCase) (CaseResult, *CaseResult, error) {
	res := CaseResult{Token: tc.Token, Name: tc.Name, Declared: tc.Kind == kindNative, Exact: tc.Exact}
	qa, qb := h.nextQueues()
	var diffs []Diff
	var blame *CaseResult
	var err error
	switch {
	case tc.Kind == kindNative:
		diffs, blame, err = h.runNative(ctx, qa, qb, tc)
	case tc.Exact:
		diffs, blame, res.Reason, err = h.runExactCase(ctx, qa, qb, tc)
	default:
		diffs, blame, err = h.runDiff(ctx, qa, qb, tc)
	}
	if err != nil {
		return res, nil, fmt.Errorf("case %s %q: %w", tc.Token, tc.Name, err)
	}
	if blame != nil {
		res.Reason = fmt.Sprintf("not judged: its %s diverged first", blame.Name)
		blame.Name += " of " + tc.Token + " case " + strconv.Quote(tc.Name)
		diffs = nil
	}
	res.Diffs = diffs
	for _, q := range []string{qa, qb} {
		keys, err := scanKeys(ctx, h.ex.c, queueKey(q)+"*")
		if err != nil {
			return res, nil, err
		}
		h.queueKeys += len(keys)
	}
	switch {
	case len(diffs) > 0:
		res.Status = Differing
	case res.Reason != "":
		res.Status = Skipped
	}
	return res, blame, nil
}

// diverged finds the first setup step after which the two sides differ
// (reply or state) and returns it as a differing result of its token.
func (h *harness) diverged(a, b sideRun, setupSteps int) *CaseResult {
	for i := 0; i < setupSteps; i++ {
		sa, sb := a.Steps[i], b.Steps[i]
		if sa.Op.Raw != nil {
			continue
		}
		diffs := compareReplies("reply", i, a.Steps, b.Steps)
		ma, da := maskSide(scriptSide, sa.After, a.Steps[:i+1], h.runID)
		mb, db := maskSide(nativeSide, sb.After, b.Steps[:i+1], h.runID)
		diffs = append(append(append(diffs, da...), db...), compareSnapshots(ma, mb)...)
		if len(diffs) > 0 {
			tok := sa.Op.Token
			return &CaseResult{Token: tok, Name: fmt.Sprintf("setup step %d (%s)", i+1, sa.Op), Status: Differing, Diffs: diffs}
		}
	}
	return nil
}

// runDiff runs a differential case: the script side on qa, then the
// native side on qb.
func (h *harness) runDiff(ctx context.Context, qa, qb string, tc testCase) ([]Diff, *CaseResult, error) {
	var runs [2]sideRun
	for s, q := range []string{qa, qb} {
		run, err := h.setup(ctx, side(s), q, tc)
		if err != nil {
			return nil, nil, err
		}
		res, err := h.ex.run(ctx, side(s), q, tc.Call)
		if err != nil {
			return nil, nil, err
		}
		run.Steps = append(run.Steps, res)
		if run.After, err = snapshotQueue(ctx, h.ex.c, q); err != nil {
			return nil, nil, err
		}
		runs[s] = run
	}
	if blame := h.diverged(runs[scriptSide], runs[nativeSide], len(tc.Setup)); blame != nil {
		return nil, blame, nil
	}
	return h.judge(tc, runs[scriptSide], runs[nativeSide]), nil, nil
}

// judge compares the two sides of a differential (or paused) case.
func (h *harness) judge(tc testCase, a, b sideRun) []Diff {
	var diffs []Diff
	last := len(a.Steps) - 1
	for i := 0; i < last; i++ {
		diffs = append(diffs, compareReplies(fmt.Sprintf("setup step %d (%s) reply", i+1, a.Steps[i].Op), i, a.Steps, b.Steps)...)
	}
	ca, cb := a.call().Reply, b.call().Reply
	if tc.Kind == kindPaused {
		if ca.Kind != KindHostSkip {
			diffs = append(diffs, Diff{Where: "script side reply (declared: the host reads the pause flag and sends nothing)", Want: Reply{Kind: KindHostSkip}.String(), Got: ca.String()})
		}
		if want := *rArr(); !cb.Equal(want) {
			diffs = append(diffs, Diff{Where: "native reply (declared: [] on a paused queue)", Want: want.String(), Got: cb.String()})
		}
	} else {
		diffs = append(diffs, compareReplies("reply", last, a.Steps, b.Steps)...)
		if tc.Want != nil {
			for _, r := range []struct {
				s side
				r Reply
			}{{scriptSide, ca}, {nativeSide, cb}} {
				if !r.r.Equal(*tc.Want) {
					diffs = append(diffs, Diff{Where: r.s.String() + " reply against the contract", Want: tc.Want.String(), Got: r.r.String()})
				}
			}
		}
	}
	for _, r := range []struct {
		s   side
		run sideRun
	}{{scriptSide, a}, {nativeSide, b}} {
		if k := r.run.call().Reply.Kind; k == KindError || k == KindHostSkip {
			for _, d := range compareExact(r.run.Before, r.run.After) {
				d.Where = r.s.String() + " side wrote on a refused call: " + d.Where
				diffs = append(diffs, d)
			}
		}
	}
	ma, da := maskSide(scriptSide, a.After, a.Steps, h.runID)
	mb, db := maskSide(nativeSide, b.After, b.Steps, h.runID)
	diffs = append(diffs, da...)
	diffs = append(diffs, db...)
	return append(diffs, compareSnapshots(ma, mb)...)
}

// runExactCase runs a lease-exact case: both setups, then the two calls and
// a TIME in one MULTI/EXEC.
func (h *harness) runExactCase(ctx context.Context, qa, qb string, tc testCase) ([]Diff, *CaseResult, string, error) {
	if len(tc.AtNow) > 0 && !h.cachedClock {
		return nil, nil, "skipped: no cached clock on " + h.version + " (a score equal to the calls' now cannot be set up in their transaction)", nil
	}
	a, err := h.setup(ctx, scriptSide, qa, tc)
	if err != nil {
		return nil, nil, "", err
	}
	b, err := h.setup(ctx, nativeSide, qb, tc)
	if err != nil {
		return nil, nil, "", err
	}
	sa, sb, inTx, err := h.ex.runExact(ctx, qa, qb, tc.Call, tc.AtNow)
	if err != nil {
		return nil, nil, "", err
	}
	a.Steps, b.Steps = append(a.Steps, sa), append(b.Steps, sb)
	if a.After, err = snapshotQueue(ctx, h.ex.c, qa); err != nil {
		return nil, nil, "", err
	}
	if b.After, err = snapshotQueue(ctx, h.ex.c, qb); err != nil {
		return nil, nil, "", err
	}
	if blame := h.diverged(a, b, len(tc.Setup)); blame != nil {
		return nil, blame, "", nil
	}
	diffs := h.judge(tc, a, b)
	if !h.cachedClock {
		return diffs, nil, "skipped: no cached clock on " + h.version + " (scores held to the window rule only)", nil
	}
	return append(diffs, exactScores(tc.Call, a, b, inTx)...), nil, "", nil
}

// exactScores demands, on a server with a cached clock, that both calls
// wrote the same time-set scores, each equal to the transaction's TIME plus
// one of the call's offsets. Members both sides' setups left as they were
// are not the calls' writes: the masked comparison judges them.
func exactScores(op Op, a, b sideRun, inTx int64) []Diff {
	var diffs []Diff
	for _, k := range a.After.sortedKeys() {
		role, _ := strings.CutPrefix(k, "emq:{Q}:")
		va, vb := a.After[k], b.After[k]
		if !timeSets[role] || va.Type != "zset" || vb.Type != "zset" {
			continue
		}
		for i, m := range va.Members {
			if i >= len(vb.Members) || vb.Members[i].Name != m.Name {
				continue // reported by the comparison
			}
			if hasMember(a.Before[k], m) && hasMember(b.Before[k], vb.Members[i]) {
				continue // not written by either call
			}
			if m.Score != vb.Members[i].Score {
				diffs = append(diffs, Diff{Where: "lease-exact: key " + k + " member " + m.Name + " score", Want: score(m.Score), Got: score(vb.Members[i].Score)})
				continue
			}
			ok := false
			for _, off := range op.offsets() {
				ok = ok || m.Score == float64(inTx+off)
			}
			if !ok {
				diffs = append(diffs, Diff{Where: "lease-exact: key " + k + " member " + m.Name + " score", Want: fmt.Sprintf("TIME in the transaction (%d) plus %v", inTx, op.offsets()), Got: score(m.Score)})
			}
		}
	}
	return diffs
}

func hasMember(v Value, m Member) bool {
	for _, x := range v.Members {
		if x == m {
			return true
		}
	}
	return false
}

// runNative runs a native-only case on q and judges it against the
// contract: the reply, the state after (Expect, or unchanged) and, for a
// fence case, the brand left as it was. Its setup also runs on the script
// side (on qa) when every setup verb has a script, so a native setup step
// that diverges is caught and blamed on its own token.
func (h *harness) runNative(ctx context.Context, qa, q string, tc testCase) (diffs []Diff, blame *CaseResult, err error) {
	run, err := h.setup(ctx, nativeSide, q, tc)
	if err != nil {
		return nil, nil, err
	}
	if scriptedSetup(tc.Setup) {
		ref, err := h.setup(ctx, scriptSide, qa, tc)
		if err != nil {
			return nil, nil, err
		}
		if blame := h.diverged(ref, run, len(tc.Setup)); blame != nil {
			return nil, blame, nil
		}
	}
	if tc.Brand != nil {
		if err := h.setBrand(ctx, *tc.Brand); err != nil {
			return nil, nil, err
		}
		defer func() {
			if rerr := h.setBrand(ctx, Brand); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	res, err := h.ex.run(ctx, nativeSide, q, tc.Call)
	if err != nil {
		return nil, nil, err
	}
	run.Steps = append(run.Steps, res)
	if tc.Brand != nil {
		got, err := h.brand(ctx)
		if err != nil {
			return nil, nil, err
		}
		if got != *tc.Brand {
			diffs = append(diffs, Diff{Where: "brand after the refused call (the fence only reads)", Want: brandText(*tc.Brand), Got: brandText(got)})
		}
	}
	if run.After, err = snapshotQueue(ctx, h.ex.c, q); err != nil {
		return nil, nil, err
	}
	if tc.Want != nil && !res.Reply.Equal(*tc.Want) {
		diffs = append(diffs, Diff{Where: "reply", Want: tc.Want.String(), Got: res.Reply.String()})
	}
	want := run.Before
	if tc.Expect != nil {
		want = tc.Expect(run.Before.clone())
	}
	return append(diffs, compareExact(want, run.After)...), nil, nil
}

// scriptedSetup reports whether every verb of the setup has a script.
func scriptedSetup(setup []Op) bool {
	for _, op := range setup {
		if nativeOnly[op.Token] {
			return false
		}
	}
	return len(setup) > 0
}

func brandText(b string) string {
	if b == "" {
		return "(absent)"
	}
	return strconv.Quote(b)
}
