package chaos

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// The checker: a pure function of the history and the nodes' final state.
// It assumes nothing about the faults; every verdict is drawn from what the
// workers were told and what the nodes hold. A violation is only reported
// when the history proves it: a call that ended in an error may or may not
// have been applied, and the checker allows both.

// Properties, in the order the report prints them.
const (
	PropLost     = "no acknowledged job lost, doubled or leaked"
	PropDouble   = "no job completed twice, no two leases at once"
	PropReplies  = "every reply belongs to its own call"
	PropNodes    = "no Lua on a module node, no EMQ verb on a scripts node"
	PropBounded  = "every call ended within its bound"
	PropStrays   = "no node holds keys of a queue it does not own at the end"
	PropAborted  = "no aborted move flipped"
	leaseSlackMs = 2 // the server's lease clock is in ms; invoke times are truncated
)

// Properties lists the properties the checker judges.
var Properties = []string{PropLost, PropDouble, PropReplies, PropNodes, PropBounded, PropStrays, PropAborted}

// The job-core sets a job can be in.
var Sets = []string{"pending", "delayed", "active", "done", "dead"}

// Final is the nodes' state after the faults stopped and the queues were
// drained.
type Final struct {
	Queues map[string]QueueFinal `json:"queues"`
}

// QueueFinal is one queue on its owner at the end.
type QueueFinal struct {
	Owner string              `json:"owner"`
	Jobs  map[string]FinalJob `json:"jobs"`
	// Strays names the other nodes that still hold keys of the queue.
	Strays []string `json:"strays,omitempty"`
}

// FinalJob is one job id found on the owner: in a set or with a row.
type FinalJob struct {
	Sets    []string `json:"sets"`
	Row     bool     `json:"row"`
	Payload string   `json:"payload,omitempty"`
	State   string   `json:"state,omitempty"`
}

// Violation is one broken property with the history lines that show it.
type Violation struct {
	Property string
	What     string
	Events   []Event
}

// Result is the checker's verdict.
type Result struct {
	Violations []Violation
	// Calls counts calls by operation and outcome ("ok", "err",
	// "timeout", "hung").
	Calls map[string]map[string]int
	// Faults counts faults injected by kind; FaultErrors those whose
	// injection or healing failed (a move refused while its node was
	// down, a node that did not come back in time).
	Faults      map[string]int
	FaultErrors map[string]int
	// Moves counts the move faults by kind and outcome (moveOutcome).
	Moves map[string]map[string]int
	// Acked is the number of enqueues acknowledged with 1.
	Acked int
	// Remaining counts the jobs left in each set after the drain.
	Remaining map[string]int
	// Notes are facts worth reading that break no property.
	Notes []string
	// Leftovers sums the runs of `queue leftovers --remove` at the end
	// (KindLeftovers): "keys" and "queues" found on a node that does not
	// own them, "removed", "skipped" (queues left alone), "runs", "errors".
	Leftovers map[string]int64
}

// Held reports whether property p held.
func (r *Result) Held(p string) bool {
	for _, v := range r.Violations {
		if v.Property == p {
			return false
		}
	}
	return true
}

// OK reports whether every property held.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

type call struct {
	inv Event
	end *Event
}

func (c *call) ok() bool { return c.end != nil && c.end.Kind == KindOK }

func (c *call) events() []Event {
	if c.end == nil {
		return []Event{c.inv}
	}
	return []Event{c.inv, *c.end}
}

type checker struct {
	res *Result
	// leftoverEvents are the runs of `queue leftovers`, shown with a stray.
	leftoverEvents []Event
	calls          []*call            // in invoke order
	byJob          map[string][]*call // queue/id -> calls naming the id (claims by the id they got)
	payload        map[string]string  // queue/id -> enqueued payload
	enqAt          map[string][]*call // queue/id -> enqueue calls
	bound          int64              // µs
	final          Final
	stats          map[string]map[string]int64 // node -> counts summed over its runs
	roles          map[string]string
	statEv         map[string][]Event
}

func jobKey(q, id string) string { return q + "/" + id }

// Check judges the history against the final state.
func Check(events []Event, final Final) *Result {
	c := &checker{
		res:     &Result{Calls: map[string]map[string]int{}, Faults: map[string]int{}, FaultErrors: map[string]int{}, Moves: map[string]map[string]int{}, Remaining: map[string]int{}, Leftovers: map[string]int64{}},
		byJob:   map[string][]*call{},
		payload: map[string]string{},
		enqAt:   map[string][]*call{},
		bound:   10_000_000,
		final:   final,
		stats:   map[string]map[string]int64{},
		roles:   map[string]string{},
		statEv:  map[string][]Event{},
	}
	c.index(events)
	c.lost()
	c.double()
	c.replies()
	c.nodes()
	c.verbOnScripts()
	c.bounded()
	return c.res
}

func (c *checker) violate(p, what string, evs ...Event) {
	evs = slices.Clone(evs)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Line < evs[j].Line })
	evs = slices.CompactFunc(evs, func(a, b Event) bool { return a.Line == b.Line && a.Line != 0 })
	c.res.Violations = append(c.res.Violations, Violation{Property: p, What: what, Events: evs})
}

func (c *checker) index(events []Event) {
	open := map[int64]*call{}
	for _, e := range events {
		switch e.Kind {
		case KindConfig:
			if e.CallBound > 0 {
				c.bound = e.CallBound * 1000
			}
		case KindFault:
			if o := moveOutcome(e); o != "" {
				if c.res.Moves[e.Fault] == nil {
					c.res.Moves[e.Fault] = map[string]int{}
				}
				c.res.Moves[e.Fault][o]++
			}
			switch e.Phase {
			case "start":
				c.res.Faults[e.Fault]++
			case "error":
				c.res.FaultErrors[e.Fault]++
			case PhaseFlippedAfterAbort:
				c.violate(PropAborted, e.Detail, e)
			}
		case KindLeftovers:
			c.res.Leftovers["runs"]++
			for k, v := range e.Counts {
				c.res.Leftovers[k] += v
			}
			c.leftoverEvents = append(c.leftoverEvents, e)
		case KindStats:
			if c.stats[e.Node] == nil {
				c.stats[e.Node] = map[string]int64{}
			}
			for k, v := range e.Counts {
				c.stats[e.Node][k] += v
			}
			c.roles[e.Node] = e.Role
			c.statEv[e.Node] = append(c.statEv[e.Node], e)
		case KindInvoke:
			cl := &call{inv: e}
			open[e.Call] = cl
			c.calls = append(c.calls, cl)
			if e.ID != "" {
				k := jobKey(e.Queue, e.ID)
				c.byJob[k] = append(c.byJob[k], cl)
			}
			if e.Op == OpEnqueue {
				k := jobKey(e.Queue, e.ID)
				c.enqAt[k] = append(c.enqAt[k], cl)
				if _, ok := c.payload[k]; !ok {
					c.payload[k] = e.Payload
				}
			}
		case KindOK, KindErr:
			cl, ok := open[e.Call]
			if !ok {
				c.violate(PropReplies, fmt.Sprintf("call %d ended but was never invoked", e.Call), e)
				continue
			}
			delete(open, e.Call)
			e := e
			cl.end = &e
			if cl.inv.Op == OpClaim && e.Kind == KindOK && e.Job != nil {
				k := jobKey(cl.inv.Queue, e.Job.ID)
				c.byJob[k] = append(c.byJob[k], cl)
			}
		}
	}
	for _, cl := range c.calls {
		m := c.res.Calls[cl.inv.Op]
		if m == nil {
			m = map[string]int{}
			c.res.Calls[cl.inv.Op] = m
		}
		switch {
		case cl.end == nil:
			m["hung"]++
		case cl.end.Kind == KindOK:
			m["ok"]++
		case cl.end.Timeout:
			m["timeout"]++
		default:
			m["err"]++
		}
		if cl.inv.Op == OpEnqueue && cl.ok() && cl.end.Int == 1 {
			c.res.Acked++
		}
	}
}

// jobEvents returns the history lines of every call naming the job, up
// to the last 12 calls.
func (c *checker) jobEvents(k string) []Event {
	var out []Event
	calls := c.byJob[k]
	if len(calls) > 12 {
		calls = calls[len(calls)-12:]
	}
	for _, cl := range calls {
		out = append(out, cl.events()...)
	}
	return out
}

// lost: every enqueue acknowledged with 1 is on its queue's owner in
// exactly one set with its row; every job the owner holds is in exactly
// one set, with its row.
func (c *checker) lost() {
	seen := map[string]bool{}
	for _, cl := range c.calls {
		inv := cl.inv
		if inv.Op != OpEnqueue || !cl.ok() || cl.end.Int != 1 {
			continue
		}
		k := jobKey(inv.Queue, inv.ID)
		if seen[k] {
			continue
		}
		seen[k] = true
		q, ok := c.final.Queues[inv.Queue]
		if !ok {
			c.violate(PropLost, fmt.Sprintf("queue %s: acknowledged job %s, and the final state has no such queue", inv.Queue, inv.ID), c.jobEvents(k)...)
			continue
		}
		if _, ok := q.Jobs[inv.ID]; !ok {
			c.violate(PropLost, fmt.Sprintf("queue %s: acknowledged job %s is not on %s (lost)", inv.Queue, inv.ID, q.Owner), c.jobEvents(k)...)
		}
	}
	for _, qn := range sortedKeys(c.final.Queues) {
		q := c.final.Queues[qn]
		for _, id := range sortedKeys(q.Jobs) {
			j := q.Jobs[id]
			for _, s := range j.Sets {
				c.res.Remaining[s]++
			}
			k := jobKey(qn, id)
			switch {
			case len(j.Sets) > 1:
				c.violate(PropLost, fmt.Sprintf("queue %s: job %s is in %d sets (%s) on %s (doubled)", qn, id, len(j.Sets), strings.Join(j.Sets, ", "), q.Owner), c.jobEvents(k)...)
			case len(j.Sets) == 0:
				c.violate(PropLost, fmt.Sprintf("queue %s: job %s has a row (state %q) but is in no set on %s (leaked)", qn, id, j.State, q.Owner), c.jobEvents(k)...)
			case !j.Row:
				c.violate(PropLost, fmt.Sprintf("queue %s: job %s is in %s without a row on %s (its payload is gone)", qn, id, j.Sets[0], q.Owner), c.jobEvents(k)...)
			case j.State != "" && j.State != j.Sets[0]:
				c.violate(PropLost, fmt.Sprintf("queue %s: job %s is in %s but its row says %s on %s", qn, id, j.Sets[0], j.State, q.Owner), c.jobEvents(k)...)
			}
		}
		if len(q.Strays) > 0 {
			c.violate(PropStrays, fmt.Sprintf("queue %s: keys left on %s besides its owner %s", qn, strings.Join(q.Strays, ", "), q.Owner), c.leftoverEvents...)
		}
	}
}

// double: no job completed (answered 1) twice; no claim of a job answered
// before an earlier claim's lease could have run out, unless the first
// holder had sent a complete or fail of it by then.
func (c *checker) double() {
	for _, k := range sortedKeys(c.byJob) {
		var completes, claims []*call
		for _, cl := range c.byJob[k] {
			switch {
			case cl.inv.Op == OpComplete && cl.ok() && cl.end.Int == 1:
				completes = append(completes, cl)
			case cl.inv.Op == OpClaim && cl.ok() && cl.end.Job != nil:
				claims = append(claims, cl)
			}
		}
		sort.SliceStable(claims, func(i, j int) bool { return claims[i].inv.T < claims[j].inv.T })
		if len(completes) > 1 {
			var evs []Event
			for _, cl := range completes {
				evs = append(evs, cl.events()...)
			}
			c.violate(PropDouble, fmt.Sprintf("job %s completed %d times", k, len(completes)), append(evs, c.jobEvents(k)...)...)
		}
		for i, a := range claims {
			for _, b := range claims[i+1:] {
				c.leases(k, a, b)
			}
		}
	}
}

// leases judges two answered claims of one job, a sent first. When a was
// answered before b was sent, a ran first, and b must not have been
// answered before a's lease could run out. When the two calls overlap in
// time either may have run first; if both ran within less than a lease of
// each other whichever order they ran in, the second ran inside the
// first's lease. Either way the job may have been released in between by
// a complete or a fail that could have run there, by any worker (the job
// core does not check who holds a job: a late fail of an earlier holder
// releases it too).
func (c *checker) leases(k string, a, b *call) {
	if a.end.T < b.inv.T {
		end := c.leaseEnd(k, a, b)
		if b.end.T/1000 >= end-leaseSlackMs || c.released(k, a.inv.T, b.end.T, a.inv.Lease) {
			return
		}
		c.violate(PropDouble, fmt.Sprintf("job %s claimed by %s (call %d) while %s's lease (call %d) ran until at least %d, %d ms later",
			k, b.inv.Proc, b.inv.Call, a.inv.Proc, a.inv.Call, end, end-b.end.T/1000), append(append(a.events(), b.events()...), c.jobEvents(k)...)...)
		return
	}
	from, to := min(a.inv.T, b.inv.T), max(a.end.T, b.end.T)
	lease := min(a.inv.Lease, b.inv.Lease)
	if (to-from)/1000 >= lease-leaseSlackMs || c.released(k, from, to, lease) {
		return
	}
	c.violate(PropDouble, fmt.Sprintf("job %s claimed by %s (call %d) and by %s (call %d), both within %d ms, less than a lease of %d ms",
		k, a.inv.Proc, a.inv.Call, b.inv.Proc, b.inv.Call, (to-from)/1000, lease), append(append(a.events(), b.events()...), c.jobEvents(k)...)...)
}

// leaseEnd is the earliest the lease claim a took can have run out, as
// far as b can know: the claim's send plus its lease, or a deadline an
// extend by the same worker was answered with before b was sent.
func (c *checker) leaseEnd(k string, a, b *call) int64 {
	end := a.inv.T/1000 + a.inv.Lease
	for _, cl := range c.byJob[k] {
		if cl.inv.Op == OpExtend && cl.inv.Proc == a.inv.Proc && cl.ok() && cl.end.Int > 0 &&
			cl.inv.T > a.end.T && cl.end.T < b.inv.T {
			end = max(end, cl.end.Int)
		}
	}
	return end
}

// released reports whether a complete or a fail of the job (by any
// worker) may have run between from and to: sent before to, not answered
// before from, and not answered "not active". An extend with a shorter
// lease than the claims' may have shortened a lease: it counts too.
func (c *checker) released(k string, from, to, lease int64) bool {
	for _, cl := range c.byJob[k] {
		if cl.inv.T >= to || (cl.end != nil && cl.end.T <= from) {
			continue
		}
		switch cl.inv.Op {
		case OpComplete:
			if !cl.ok() || cl.end.Int == 1 {
				return true
			}
		case OpFail:
			if !cl.ok() || cl.end.Int >= 0 {
				return true
			}
		case OpExtend:
			if cl.inv.Lease < lease {
				return true
			}
		}
	}
	return false
}

// replies: each reply is one its call can get.
func (c *checker) replies() {
	for _, cl := range c.calls {
		if !cl.ok() {
			continue
		}
		inv, end := cl.inv, cl.end
		ms := inv.T / 1000
		bad := func(format string, args ...any) {
			c.violate(PropReplies, fmt.Sprintf("%s call %d by %s: ", inv.Op, inv.Call, inv.Proc)+fmt.Sprintf(format, args...), cl.events()...)
		}
		switch inv.Op {
		case OpEnqueue:
			switch end.Int {
			case 1:
			case 0:
				// "existed": only after an earlier attempt of the same id.
				earlier := false
				for _, o := range c.enqAt[jobKey(inv.Queue, inv.ID)] {
					if o != cl && o.inv.T < end.T {
						earlier = true
					}
				}
				if !earlier {
					bad("a new id %s answered existed", inv.ID)
				}
			default:
				bad("answered %d", end.Int)
			}
		case OpClaim:
			if end.Job == nil {
				if !end.Empty {
					bad("answered neither a job nor empty")
				}
				continue
			}
			j := end.Job
			k := jobKey(inv.Queue, j.ID)
			p, ok := c.payload[k]
			switch {
			case !ok:
				bad("got job %s, never enqueued on queue %s", j.ID, inv.Queue)
			case p != j.Payload:
				bad("got job %s with payload %q, enqueued with %q", j.ID, j.Payload, p)
			case j.Attempts < 1:
				bad("got job %s with attempts %d", j.ID, j.Attempts)
			}
		case OpComplete, OpRetry:
			if end.Int != 0 && end.Int != 1 {
				bad("answered %d", end.Int)
			}
			if inv.Op == OpComplete && end.Int == 1 && !c.held(cl) {
				bad("completed %s, which this worker never claimed", inv.ID)
			}
		case OpFail:
			if end.Int < -1 || (end.Int > 0 && end.Int < ms) {
				bad("answered %d", end.Int)
			}
		case OpExtend:
			if end.Int != 0 && end.Int < ms+inv.Lease-leaseSlackMs {
				bad("answered deadline %d, before its send plus the lease (%d)", end.Int, ms+inv.Lease)
			}
		case OpReap, OpPromote:
			if end.Int < 0 {
				bad("answered %d", end.Int)
			}
		}
	}
	for _, qn := range sortedKeys(c.final.Queues) {
		for _, id := range sortedKeys(c.final.Queues[qn].Jobs) {
			j := c.final.Queues[qn].Jobs[id]
			k := jobKey(qn, id)
			p, ok := c.payload[k]
			switch {
			case !ok:
				c.violate(PropReplies, fmt.Sprintf("queue %s holds job %s, which no worker enqueued there", qn, id))
			case j.Row && j.Payload != p:
				c.violate(PropReplies, fmt.Sprintf("queue %s: job %s holds payload %q, enqueued with %q", qn, id, j.Payload, p), c.jobEvents(k)...)
			}
		}
	}
}

// held reports whether the worker of a complete had got the job from a
// claim answered before the complete was sent.
func (c *checker) held(cl *call) bool {
	for _, o := range c.byJob[jobKey(cl.inv.Queue, cl.inv.ID)] {
		if o.inv.Op == OpClaim && o.inv.Proc == cl.inv.Proc && o.ok() && o.end.Job != nil && o.end.T <= cl.inv.T {
			return true
		}
	}
	return false
}

// luaWrites are the commands that run Lua or functions able to write. A
// pinned read script leaves the proxy as EVALSHA_RO by design (the server
// refuses a write in it), so EVAL_RO and EVALSHA_RO are counted, not
// violations.
var luaWrites = []string{"eval", "evalsha", "fcall"}

// nodes: the nodes' own command statistics, summed over every run of the
// node (a snapshot before each kill and one at the end).
func (c *checker) nodes() {
	for _, n := range sortedKeys(c.stats) {
		counts := c.stats[n]
		switch c.roles[n] {
		case "module":
			for _, cmd := range luaWrites {
				if counts[cmd] > 0 {
					c.violate(PropNodes, fmt.Sprintf("module node %s ran %s %d times", n, cmd, counts[cmd]), c.statEv[n]...)
				}
			}
			if ro := counts["eval_ro"] + counts["evalsha_ro"]; ro > 0 {
				c.res.Notes = append(c.res.Notes, fmt.Sprintf("module node %s ran %d read-only script calls (EVALSHA_RO of the pinned reads, by design)", n, ro))
			}
		case "scripts":
			if e := counts["errorstat_err"]; e > 0 {
				c.res.Notes = append(c.res.Notes, fmt.Sprintf("scripts node %s answered %d ERR errors (the sidecars' fences ask every node EMQ.VERSION, which a scripts node answers as an unknown command)", n, e))
			}
			for _, cmd := range sortedKeys(counts) {
				if (strings.HasPrefix(cmd, "emq.") || cmd == "unknown") && counts[cmd] > 0 {
					c.violate(PropNodes, fmt.Sprintf("scripts node %s was sent %s %d times", n, cmd, counts[cmd]), c.statEv[n]...)
				}
			}
		}
	}
}

// verbOnScripts: a verb that reached a scripts node answers "unknown
// command", which the sidecar passes back to the worker; no call of a
// worker may get it.
func (c *checker) verbOnScripts() {
	for _, cl := range c.calls {
		if cl.end != nil && cl.end.Kind == KindErr && strings.Contains(strings.ToLower(cl.end.Err), "unknown command") {
			c.violate(PropNodes, fmt.Sprintf("%s call %d by %s was answered unknown command (a verb on a scripts node?)", cl.inv.Op, cl.inv.Call, cl.inv.Proc), cl.events()...)
		}
	}
}

// bounded: every call ended, within the bound.
func (c *checker) bounded() {
	for _, cl := range c.calls {
		switch {
		case cl.end == nil:
			c.violate(PropBounded, fmt.Sprintf("%s call %d by %s never ended", cl.inv.Op, cl.inv.Call, cl.inv.Proc), cl.inv)
		case cl.end.T-cl.inv.T > c.bound:
			c.violate(PropBounded, fmt.Sprintf("%s call %d by %s took %d ms, the bound is %d ms", cl.inv.Op, cl.inv.Call, cl.inv.Proc,
				(cl.end.T-cl.inv.T)/1000, c.bound/1000), cl.events()...)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The outcomes of a move fault, in the report's order: the queue ended on
// the move's target, stayed on its source (refused, aborted, or rolled
// back), ended on a third node, or its owner is not known.
var moveOutcomes = []string{"moved", "stayed", "elsewhere", "unknown"}

var (
	moveRoute = regexp.MustCompile(`^[^:]+: (\S+) -> (\S+?)[,;]`)
	moveOwner = regexp.MustCompile(`owner now ([^:;\s]+)`)
)

// moveOutcome is the outcome of a move fault's last event ("end" or
// "error": its detail names the move's source and target, then the
// owner found after it), "" for any other event.
func moveOutcome(e Event) string {
	if e.Phase != "end" && e.Phase != "error" || !slices.Contains([]string{FaultMove, FaultMoveKilled, FaultMoveStopped}, e.Fault) {
		return ""
	}
	r, o := moveRoute.FindStringSubmatch(e.Detail), moveOwner.FindStringSubmatch(e.Detail)
	switch {
	case r == nil || o == nil:
		return "unknown"
	case o[1] == r[2]:
		return "moved"
	case o[1] == r[1]:
		return "stayed"
	}
	return "elsewhere"
}
