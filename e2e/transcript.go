package e2e

import (
	"context"
	"sync"
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Step is one step of a scenario: the replies its clients saw and the
// window of server time around it.
type Step struct {
	Name string
	// Together marks a step whose calls ran concurrently: they are compared
	// as a multiset, not in order.
	Together bool
	// Lo and Hi are the server's time in ms (TIME) just before and just
	// after the step: every "now" a call of the step computed lies in
	// [Lo, Hi].
	Lo, Hi int64
	// Calls are the replies the clients saw during the step, in the order
	// they were recorded.
	Calls []legacy.Call
}

// Checkpoint is the state of the node after some step.
type Checkpoint struct {
	Name  string
	After int // index of the last step before the snapshot
	Keys  Snapshot
}

// Transcript records one run of a scenario on one path: its steps, every
// reply the clients saw, and snapshots of the node's keys. It is safe for
// concurrent recording; steps themselves run one after the other.
type Transcript struct {
	Path *Path
	// EndStats is the node's INFO commandstats (calls per command) when
	// the run finished (Finish), read while the node still runs.
	EndStats map[string]int64

	t   testing.TB
	ctx context.Context

	mu          sync.Mutex
	steps       []Step
	checkpoints []Checkpoint
}

// NewTranscript starts a transcript on path. ctx bounds every call the
// transcript makes itself (TIME, snapshots).
func NewTranscript(t testing.TB, ctx context.Context, path *Path) *Transcript {
	return &Transcript{Path: path, t: t, ctx: ctx}
}

// Record is the legacy client's Options.Record: the call joins the step
// running (or, between steps, the last one).
func (tr *Transcript) Record(c legacy.Call) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.steps) == 0 {
		tr.steps = append(tr.steps, Step{Name: "(before the first step)"})
	}
	s := &tr.steps[len(tr.steps)-1]
	s.Calls = append(s.Calls, c)
}

// Dial connects a legacy client to the path, recording into the
// transcript, with the pinned map checked and a client name set (so the
// boot sends CLIENT SETNAME). It is closed at cleanup.
func (tr *Transcript) Dial(name string) *legacy.Client {
	tr.t.Helper()
	c, err := legacy.Dial(tr.ctx, legacy.Options{
		Addr:       tr.Path.Addr,
		ClientName: name,
		Brand:      tr.Path.Map.LegacyBrand,
		Map:        tr.Path.Map,
		Record:     tr.Record,
	})
	if err != nil {
		tr.t.Fatalf("%s path: dial %s: %v", tr.Path.Name, tr.Path.Addr, err)
	}
	tr.t.Cleanup(c.Close)
	return c
}

// Step runs fn as one step: its calls are compared in order.
func (tr *Transcript) Step(name string, fn func()) { tr.step(name, false, fn) }

// Together runs fn as one step whose calls run concurrently: they are
// compared as a multiset.
func (tr *Transcript) Together(name string, fn func()) { tr.step(name, true, fn) }

func (tr *Transcript) step(name string, together bool, fn func()) {
	tr.t.Helper()
	lo := tr.now()
	tr.mu.Lock()
	tr.steps = append(tr.steps, Step{Name: name, Together: together, Lo: lo})
	i := len(tr.steps) - 1
	tr.mu.Unlock()
	fn()
	hi := tr.now()
	tr.mu.Lock()
	tr.steps[i].Hi = hi
	tr.mu.Unlock()
}

// now reads the node's clock.
func (tr *Transcript) now() int64 {
	tr.t.Helper()
	ms, err := ServerMillis(tr.ctx, tr.Path.Direct)
	if err != nil {
		tr.t.Fatalf("%s path: %v", tr.Path.Name, err)
	}
	return ms
}

// Keys takes a snapshot of every key of the node (the version key aside),
// compared with the other path's snapshot of the same name, and returns it.
func (tr *Transcript) Keys(name string) Snapshot {
	tr.t.Helper()
	snap, err := ReadKeys(tr.ctx, tr.Path.Direct)
	if err != nil {
		tr.t.Fatalf("%s path: %v", tr.Path.Name, err)
	}
	tr.mu.Lock()
	tr.checkpoints = append(tr.checkpoints, Checkpoint{Name: name, After: len(tr.steps) - 1, Keys: snap})
	tr.mu.Unlock()
	return snap
}

// Finish ends the run: a last snapshot ("end") and the node's command
// statistics (EndStats).
func (tr *Transcript) Finish() {
	tr.t.Helper()
	tr.Keys("end")
	st, err := node.CommandStats(tr.ctx, tr.Path.Direct)
	if err != nil {
		tr.t.Fatalf("%s path: %v", tr.Path.Name, err)
	}
	tr.EndStats = st
}

// Steps returns a copy of the steps so far.
func (tr *Transcript) Steps() []Step {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make([]Step, len(tr.steps))
	for i, s := range tr.steps {
		s.Calls = append([]legacy.Call(nil), s.Calls...)
		out[i] = s
	}
	return out
}

// Checkpoints returns the snapshots taken so far.
func (tr *Transcript) Checkpoints() []Checkpoint {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]Checkpoint(nil), tr.checkpoints...)
}

// Calls returns every call recorded so far, across steps.
func (tr *Transcript) Calls() []legacy.Call {
	var out []legacy.Call
	for _, s := range tr.Steps() {
		out = append(out, s.Calls...)
	}
	return out
}

// WaitPastLastStep polls the node's clock until it is past the end of the
// last step, so a lease of 0 ms taken in that step has expired (REAP takes
// deadlines strictly before now).
func (tr *Transcript) WaitPastLastStep() {
	tr.t.Helper()
	tr.mu.Lock()
	hi := tr.steps[len(tr.steps)-1].Hi
	tr.mu.Unlock()
	if err := WaitFor(tr.ctx, func() bool { return tr.now() > hi }); err != nil {
		tr.t.Fatalf("%s path: the clock never passed %d: %v", tr.Path.Name, hi, err)
	}
}
