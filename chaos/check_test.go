package chaos

import (
	"bytes"
	"strings"
	"testing"
)

// hist builds a history by hand: times are in ms from a fixed origin.
type hist struct {
	events []Event
	call   int64
}

const t0 = int64(1_700_000_000_000) // ms

func (h *hist) add(e Event) {
	e.Line = len(h.events) + 1
	h.events = append(h.events, e)
}

// do adds a call sent at ms and answered at ms+dur with end (Kind "ok"
// unless end.Kind is set).
func (h *hist) do(ms, dur int64, inv Event, end Event) {
	h.call++
	inv.Kind, inv.Call, inv.T = KindInvoke, h.call, (t0+ms)*1000
	h.add(inv)
	if end.Kind == "" {
		end.Kind = KindOK
	}
	end.Call, end.T = h.call, (t0+ms+dur)*1000
	h.add(end)
}

func (h *hist) enqueue(ms int64, proc, q, id string, reply int64) {
	h.do(ms, 1, Event{Proc: proc, Op: OpEnqueue, Queue: q, ID: id, Payload: "p " + id}, Event{Int: reply})
}

func (h *hist) claim(ms int64, proc, q, id string, lease int64) {
	h.do(ms, 1, Event{Proc: proc, Op: OpClaim, Queue: q, Lease: lease}, Event{Job: &Job{ID: id, Payload: "p " + id, Attempts: 1}})
}

func (h *hist) complete(ms int64, proc, q, id string, reply int64) {
	h.do(ms, 1, Event{Proc: proc, Op: OpComplete, Queue: q, ID: id}, Event{Int: reply})
}

func done(ids ...string) Final {
	jobs := map[string]FinalJob{}
	for _, id := range ids {
		jobs[id] = FinalJob{Sets: []string{"done"}, Row: true, Payload: "p " + id, State: "done"}
	}
	return Final{Queues: map[string]QueueFinal{"alpha": {Owner: "module-a", Jobs: jobs}}}
}

// good is a history that breaks nothing: two jobs, one enqueued twice
// after an error, a lease run out and the job claimed again, completes.
func good() *hist {
	h := &hist{}
	h.add(Event{Kind: KindConfig, CallBound: 5000, Seed: 7})
	h.enqueue(0, "w1", "alpha", "a1", 1)
	h.do(5, 3000, Event{Proc: "w2", Op: OpEnqueue, Queue: "alpha", ID: "a2", Payload: "p a2"}, Event{Kind: KindErr, Err: "context deadline exceeded", Timeout: true})
	h.enqueue(3010, "w2", "alpha", "a2", 0) // the first attempt had been applied
	h.claim(3020, "w1", "alpha", "a1", 100)
	h.claim(3200, "w2", "alpha", "a1", 100) // a1's lease ran out at 3120
	h.complete(3210, "w2", "alpha", "a1", 1)
	h.complete(3220, "w1", "alpha", "a1", 0)
	h.claim(3300, "w1", "alpha", "a2", 1000)
	h.do(3310, 1, Event{Proc: "w1", Op: OpExtend, Queue: "alpha", ID: "a2", Lease: 1000}, Event{Int: t0 + 4310})
	h.complete(3400, "w1", "alpha", "a2", 1)
	h.add(Event{Kind: KindStats, Node: "module-a/1", Role: "module", Counts: map[string]int64{"emq.claim": 3, "get": 10}})
	h.add(Event{Kind: KindStats, Node: "scripts-c", Role: "scripts", Counts: map[string]int64{"evalsha": 3}})
	return h
}

func TestCheckerPassesAGoodHistory(t *testing.T) {
	h := good()
	r := Check(h.events, done("a1", "a2"))
	for _, v := range r.Violations {
		t.Errorf("%s: %s", v.Property, v.What)
	}
	if r.Acked != 1 || r.Calls[OpEnqueue]["timeout"] != 1 || r.Calls[OpClaim]["ok"] != 3 {
		t.Errorf("counts: acked %d, calls %v", r.Acked, r.Calls)
	}
}

// TestCheckerCatchesEachViolation breaks each property in its own way and
// expects exactly that property to fail, with the lines that show it.
func TestCheckerCatchesEachViolation(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(h *hist, f *Final)
		prop  string
		what  string
		lines int // at least this many history lines printed with it
	}{
		{"an acknowledged job is gone", func(h *hist, f *Final) { delete(f.Queues["alpha"].Jobs, "a1") }, PropLost, "a1 is not on module-a (lost)", 2},
		{"a job is in two sets", func(h *hist, f *Final) {
			f.Queues["alpha"].Jobs["a2"] = FinalJob{Sets: []string{"done", "pending"}, Row: true, Payload: "p a2", State: "done"}
		}, PropLost, "in 2 sets", 2},
		{"a row in no set", func(h *hist, f *Final) {
			f.Queues["alpha"].Jobs["a2"] = FinalJob{Row: true, Payload: "p a2", State: "active"}
		}, PropLost, "leaked", 2},
		{"the queue is missing", func(h *hist, f *Final) { delete(f.Queues, "alpha") }, PropLost, "no such queue", 2},
		{"completed twice", func(h *hist, f *Final) { h.complete(3500, "w1", "alpha", "a2", 1) }, PropDouble, "completed 2 times", 4},
		{"a claim inside another's lease", func(h *hist, f *Final) {
			h.enqueue(4000, "w1", "alpha", "a3", 1)
			h.claim(4010, "w1", "alpha", "a3", 5000)
			h.claim(4500, "w2", "alpha", "a3", 5000)
			f.Queues["alpha"].Jobs["a3"] = FinalJob{Sets: []string{"active"}, Row: true, Payload: "p a3", State: "active"}
		}, PropDouble, "while w1's lease", 4},
		{"a claim inside an extended lease", func(h *hist, f *Final) {
			h.enqueue(4000, "w1", "alpha", "a3", 1)
			h.claim(4010, "w1", "alpha", "a3", 100)
			h.do(4050, 1, Event{Proc: "w1", Op: OpExtend, Queue: "alpha", ID: "a3", Lease: 1000}, Event{Int: t0 + 5050})
			h.claim(4500, "w2", "alpha", "a3", 100)
			f.Queues["alpha"].Jobs["a3"] = FinalJob{Sets: []string{"active"}, Row: true, Payload: "p a3", State: "active"}
		}, PropDouble, "ran until at least", 4},
		{"an enqueue of a new id answered existed", func(h *hist, f *Final) {
			h.enqueue(4000, "w1", "alpha", "a4", 0)
		}, PropReplies, "a new id a4 answered existed", 2},
		{"a claim answered another job's payload", func(h *hist, f *Final) {
			h.enqueue(4000, "w1", "alpha", "a5", 1)
			h.do(4010, 1, Event{Proc: "w2", Op: OpClaim, Queue: "alpha", Lease: 100}, Event{Job: &Job{ID: "a5", Payload: "p a1", Attempts: 1}})
			f.Queues["alpha"].Jobs["a5"] = FinalJob{Sets: []string{"active"}, Row: true, Payload: "p a5", State: "active"}
		}, PropReplies, `payload "p a1"`, 2},
		{"a claim answered a job of another queue", func(h *hist, f *Final) {
			h.do(4010, 1, Event{Proc: "w2", Op: OpClaim, Queue: "bravo", Lease: 100}, Event{Job: &Job{ID: "a1", Payload: "p a1", Attempts: 1}})
		}, PropReplies, "never enqueued on queue bravo", 2},
		{"a complete of a job never held", func(h *hist, f *Final) {
			h.enqueue(4000, "w1", "alpha", "a6", 1)
			h.complete(4010, "w1", "alpha", "a6", 1)
			f.Queues["alpha"].Jobs["a6"] = FinalJob{Sets: []string{"done"}, Row: true, Payload: "p a6", State: "done"}
		}, PropReplies, "never claimed", 2},
		{"a job nobody enqueued", func(h *hist, f *Final) {
			f.Queues["alpha"].Jobs["zz"] = FinalJob{Sets: []string{"pending"}, Row: true, Payload: "?", State: "pending"}
		}, PropReplies, "no worker enqueued", 0},
		{"a claim inside a lease extended at once", func(h *hist, f *Final) {
			h.enqueue(4000, "w1", "alpha", "a3", 1)
			h.claim(4010, "w1", "alpha", "a3", 100)
			h.do(4012, 1, Event{Proc: "w1", Op: OpExtend, Queue: "alpha", ID: "a3", Lease: 1000}, Event{Int: t0 + 5012})
			h.claim(4200, "w2", "alpha", "a3", 100)
			f.Queues["alpha"].Jobs["a3"] = FinalJob{Sets: []string{"active"}, Row: true, Payload: "p a3", State: "active"}
		}, PropDouble, "811 ms later", 4},
		{"two overlapping claims within one lease", func(h *hist, f *Final) {
			h.enqueue(4000, "w1", "alpha", "a3", 1)
			h.do(4010, 300, Event{Proc: "w1", Op: OpClaim, Queue: "alpha", Lease: 2000}, Event{Job: &Job{ID: "a3", Payload: "p a3", Attempts: 1}})
			h.do(4100, 50, Event{Proc: "w2", Op: OpClaim, Queue: "alpha", Lease: 2000}, Event{Job: &Job{ID: "a3", Payload: "p a3", Attempts: 2}})
			f.Queues["alpha"].Jobs["a3"] = FinalJob{Sets: []string{"active"}, Row: true, Payload: "p a3", State: "active"}
		}, PropDouble, "both within 300 ms", 4},
		{"Lua on a module node", func(h *hist, f *Final) {
			h.add(Event{Kind: KindStats, Node: "module-a/1", Role: "module", Counts: map[string]int64{"evalsha": 1}})
		}, PropNodes, "ran evalsha 1 times", 2},
		{"a verb on a scripts node", func(h *hist, f *Final) {
			h.add(Event{Kind: KindStats, Node: "scripts-c", Role: "scripts", Counts: map[string]int64{"unknown": 2}})
		}, PropNodes, "was sent unknown 2 times", 2},
		{"a verb answered unknown command", func(h *hist, f *Final) {
			h.do(6000, 1, Event{Proc: "w3", Op: OpReap, Queue: "alpha"}, Event{Kind: KindErr, Err: "legacy: reap: ERR unknown command 'EMQ.REAP', with args beginning with: "})
		}, PropNodes, "unknown command", 2},
		{"a call never ended", func(h *hist, f *Final) {
			h.add(Event{Kind: KindInvoke, Call: 999, Proc: "w3", Op: OpReap, Queue: "alpha", T: (t0 + 5000) * 1000})
		}, PropBounded, "never ended", 1},
		{"a call past its bound", func(h *hist, f *Final) {
			h.do(6000, 5001, Event{Proc: "w3", Op: OpPromote, Queue: "alpha"}, Event{Int: 0})
		}, PropBounded, "took 5001 ms", 2},
		{"keys of a queue left on a node that does not own it", func(h *hist, f *Final) {
			h.add(Event{Kind: KindLeftovers, Proc: "nemesis", Counts: map[string]int64{"keys": 3, "queues": 1, "removed": 0, "skipped": 0}, Detail: "leftovers: 3 keys"})
			q := f.Queues["alpha"]
			q.Strays = []string{"module-b (3 keys)"}
			f.Queues["alpha"] = q
		}, PropStrays, "keys left on module-b (3 keys) besides its owner module-a", 1},
		{"a move flipped after its abort", func(h *hist, f *Final) {
			h.add(Event{Kind: KindFault, Proc: "nemesis", Fault: FaultMoveStopped, Phase: PhaseFlippedAfterAbort, Detail: "queue alpha: the mover stopped after its hold flipped it to module-b"})
		}, PropAborted, "flipped it to module-b", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			f := done("a1", "a2")
			tc.edit(h, &f)
			r := Check(h.events, f)
			if r.OK() {
				t.Fatalf("no violation found")
			}
			for _, p := range Properties {
				if want := p == tc.prop; r.Held(p) == want {
					t.Errorf("property %q held=%v", p, r.Held(p))
				}
			}
			found := false
			for _, v := range r.Violations {
				if v.Property == tc.prop && strings.Contains(v.What, tc.what) && len(v.Events) >= tc.lines {
					found = true
				}
			}
			var buf bytes.Buffer
			WriteViolations(&buf, r, 5)
			if !found {
				t.Errorf("want a %q violation saying %q with %d lines:\n%s", tc.prop, tc.what, tc.lines, buf.String())
			}
			t.Logf("\n%s", buf.String())
		})
	}
}

// TestCheckerAllowsOverlappingClaims: two claims of one job whose calls
// overlap in time may have run in either order (the later-sent one first,
// its job failed back, then the earlier-sent one): no violation.
func TestCheckerAllowsOverlappingClaims(t *testing.T) {
	h := good()
	h.enqueue(4000, "w1", "alpha", "a3", 1)
	h.call++
	slow := h.call
	h.add(Event{Kind: KindInvoke, Call: slow, Proc: "w4", Op: OpClaim, Queue: "alpha", Lease: 2000, T: (t0 + 4001) * 1000})
	h.claim(4050, "w2", "alpha", "a3", 2000)
	h.do(4052, 1, Event{Proc: "w2", Op: OpFail, Queue: "alpha", ID: "a3"}, Event{Int: t0 + 4152})
	h.do(4160, 1, Event{Proc: "w3", Op: OpPromote, Queue: "alpha"}, Event{Int: 1})
	h.add(Event{Kind: KindOK, Call: slow, Proc: "w4", Job: &Job{ID: "a3", Payload: "p a3", Attempts: 2}, T: (t0 + 4200) * 1000})
	h.complete(4210, "w4", "alpha", "a3", 1)
	f := done("a1", "a2", "a3")
	r := Check(h.events, f)
	var buf bytes.Buffer
	WriteViolations(&buf, r, 5)
	if !r.OK() {
		t.Errorf("overlapping claims judged a violation:\n%s", buf.String())
	}
}

// TestCheckerAllowsALateReleaseByAnEarlierHolder: w1's fail, sent after
// its lease ran out and answered by its deadline, may have run while w3
// held the job (the job core does not check the holder): w2's claim
// inside w3's lease is no violation.
func TestCheckerAllowsALateReleaseByAnEarlierHolder(t *testing.T) {
	h := good()
	h.enqueue(4000, "w1", "alpha", "a3", 1)
	h.claim(4010, "w1", "alpha", "a3", 100)
	h.do(4150, 2000, Event{Proc: "w1", Op: OpFail, Queue: "alpha", ID: "a3"}, Event{Kind: KindErr, Err: "context deadline exceeded", Timeout: true})
	h.do(4190, 1, Event{Proc: "w4", Op: OpReap, Queue: "alpha"}, Event{Int: 1})
	h.claim(4200, "w3", "alpha", "a3", 2000)
	h.claim(4400, "w2", "alpha", "a3", 2000)
	h.complete(4410, "w2", "alpha", "a3", 1)
	r := Check(h.events, done("a1", "a2", "a3"))
	var buf bytes.Buffer
	WriteViolations(&buf, r, 5)
	if !r.OK() {
		t.Errorf("a possible release judged a violation:\n%s", buf.String())
	}
	// Without the late fail, the same claims are a violation.
	h = good()
	h.enqueue(4000, "w1", "alpha", "a3", 1)
	h.claim(4010, "w1", "alpha", "a3", 100)
	h.do(4190, 1, Event{Proc: "w4", Op: OpReap, Queue: "alpha"}, Event{Int: 1})
	h.claim(4200, "w3", "alpha", "a3", 2000)
	h.claim(4400, "w2", "alpha", "a3", 2000)
	h.complete(4410, "w2", "alpha", "a3", 1)
	if r := Check(h.events, done("a1", "a2", "a3")); r.Held(PropDouble) {
		t.Errorf("w2's claim inside w3's lease was not caught")
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	path := t.TempDir() + "/history.jsonl"
	h, err := NewHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range good().events {
		e.Line = 0
		h.Add(e)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readHistoryFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := good().events
	if len(got) != len(want) {
		t.Fatalf("%d events read, %d written", len(got), len(want))
	}
	r := Check(got, done("a1", "a2"))
	if !r.OK() {
		t.Errorf("the history read back breaks %q", r.Violations[0].What)
	}
}

// TestCheckerCountsLeftovers: the runs of `queue leftovers --remove` are
// summed in the result and named in the report.
func TestCheckerCountsLeftovers(t *testing.T) {
	h := good()
	h.add(Event{Kind: KindLeftovers, Proc: "nemesis", Counts: map[string]int64{"keys": 12, "queues": 2, "removed": 12, "skipped": 1}})
	r := Check(h.events, done("a1", "a2"))
	if !r.OK() {
		t.Fatalf("violations: %v", r.Violations)
	}
	if l := r.Leftovers; l["runs"] != 1 || l["keys"] != 12 || l["queues"] != 2 || l["removed"] != 12 || l["skipped"] != 1 {
		t.Errorf("leftovers counted %v", l)
	}
	var b strings.Builder
	WriteReport(&b, Summary{}, r)
	if want := "12 keys of 2 queue(s) on nodes that do not own them, 12 removed, 1 queue(s) skipped"; !strings.Contains(b.String(), want) {
		t.Errorf("the report lacks %q:\n%s", want, b.String())
	}
}

// TestMoveOutcome: a move fault's last event is counted by where its
// queue ended, read from the detail the nemesis writes.
func TestMoveOutcome(t *testing.T) {
	for _, c := range []struct {
		fault, phase, detail, want string
	}{
		{FaultMove, "end", "bravo1: module-b -> scripts-c; moved; owner now scripts-c", "moved"},
		{FaultMove, "error", "alpha1: module-b -> module-a; move alpha1 --to module-a: exit status 1: x; owner now module-b: the queue did not move", "stayed"},
		{FaultMoveKilled, "error", "delta1: module-a -> module-b, mover killed after copied; owner now scripts-c", "elsewhere"},
		{FaultMoveStopped, "end", "bravo1: scripts-c -> module-b; stopped after its hold, aborted: aborted: bravo1 released on scripts-c at epoch 25; owner now scripts-c", "stayed"},
		{FaultMove, "error", "charlie1: scripts-c -> module-a; the mover did not start", "unknown"},
		{FaultMove, "start", "bravo1: module-b -> scripts-c", ""},
		{FaultSidecarKill, "end", "sidecar 1: owner now x", ""},
	} {
		if got := moveOutcome(Event{Kind: KindFault, Fault: c.fault, Phase: c.phase, Detail: c.detail}); got != c.want {
			t.Errorf("%s %s %q: %q, want %q", c.fault, c.phase, c.detail, got, c.want)
		}
	}
}
