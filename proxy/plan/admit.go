package plan

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Admission by the control table (package proxy's control.go has the loop
// and its guarantees, its hold.go the waiting).
//
// With the control table on, a forwarded command whose keys name a queue
// (the hashtag of a key) is admitted only when none of its queues is held
// and the proxy's lease on the node each queue routes to is valid.
// Otherwise the step says Wait, with the queue that may not be sent; the
// caller waits for a new state or a renewal and decides again, and past its
// hold decides it with Step.WaitedOut: then a queue that still may not be
// sent refuses it with TRYAGAIN (refuseHeld). Other queues, and
// keyless commands, are not held.
//
// An admitted command counts in flight in the state it was admitted under
// (Step.Admitted) until the caller releases it, in total and in the slot of
// each of its queues (Step.Slots). The control loop acknowledges a new
// epoch once no command admitted under an older state is in flight in the
// slot of a queue the new state changed (held, released or given another
// owner): only those may still reach the old owner of a changed queue. A
// command of any other queue (a BLPOP with no timeout, a WAIT, a reply a
// slow client does not read) never delays an acknowledgement. A queue
// sharing its slot with a changed one is waited for too: a hash collision
// costs a wait, never a missed one. A transaction is admitted at EXEC, by
// the queues of the commands it queued.

// ReasonHeld is the refusal reason of a command whose queue stayed held
// past the hold, or whose transaction's queue moved since its script calls
// were queued.
const ReasonHeld rewrite.Reason = "held"

// ControlState is one applied merged control table. It is never modified
// once the control loop stored it, except its counts of commands in flight.
type ControlState struct {
	Epoch    int64
	Held     map[string]bool               // the queues that are held
	Owner    map[string]*upstream.Upstream // the moved queues' owners
	inflight atomic.Int64                  // commands admitted under this state, not yet answered
	slots    [NumSlots]atomic.Int64        // the same, per slot of their queues (SlotOf)
	changed  chan struct{}                 // closed when a newer state is stored
}

// NumSlots is the number of slots queues are counted in (SlotOf).
const NumSlots = 512

// Slots is a set of slots: those of one command's queues.
type Slots [NumSlots / 64]uint64

// SlotOf is the slot of queue q (FNV-1a of its name).
func SlotOf(q []byte) int {
	h := uint32(2166136261)
	for _, c := range q {
		h ^= uint32(c)
		h *= 16777619
	}
	return int(h % NumSlots)
}

// Add puts q's slot in the set.
func (s *Slots) Add(q []byte) {
	i := SlotOf(q)
	s[i/64] |= 1 << (i % 64)
}

// Has reports whether q's slot is in the set.
func (s *Slots) Has(q string) bool {
	i := SlotOf([]byte(q))
	return s[i/64]&(1<<(i%64)) != 0
}

// each calls f with every slot of the set.
func (s *Slots) each(f func(i int)) {
	for w, word := range s {
		for word != 0 {
			b := word & -word
			f(w*64 + bits.TrailingZeros64(b))
			word &^= b
		}
	}
}

// NewControlState returns a state of the merged table at epoch.
func NewControlState(epoch int64, held map[string]bool, owner map[string]*upstream.Upstream) *ControlState {
	return &ControlState{Epoch: epoch, Held: held, Owner: owner, changed: make(chan struct{})}
}

// count counts a command of the slots sl in flight under st (n 1), or
// uncounts it (n -1).
func (st *ControlState) count(sl *Slots, n int64) {
	st.inflight.Add(n)
	sl.each(func(i int) { st.slots[i].Add(n) })
}

// Release uncounts a command admitted under st (Step.Admitted) with the
// slots of its queues (Step.Slots) once its reply is in.
func (st *ControlState) Release(sl *Slots) { st.count(sl, -1) }

// InFlight is how many commands admitted under st are not answered yet.
func (st *ControlState) InFlight() int64 { return st.inflight.Load() }

// QueueInFlight is how many commands admitted under st whose queues share
// q's slot are not answered yet.
func (st *ControlState) QueueInFlight(q string) int64 {
	return st.slots[SlotOf([]byte(q))].Load()
}

// ChangedTo lists the queues whose route differs between st and to: held in
// one and not the other, or owned by another upstream (a queue absent from
// Owner follows the file's routes).
func (st *ControlState) ChangedTo(to *ControlState) []string {
	var qs []string
	seen := map[string]bool{}
	check := func(q string) {
		if !seen[q] {
			seen[q] = true
			if st.Held[q] != to.Held[q] || st.Owner[q] != to.Owner[q] {
				qs = append(qs, q)
			}
		}
	}
	for _, s := range []*ControlState{st, to} {
		for q := range s.Held {
			check(q)
		}
		for q := range s.Owner {
			check(q)
		}
	}
	return qs
}

// Moved reports whether a command of the slots sl, admitted under st, may
// no longer be sent under to: to changed one of its queues (or one
// sharing its slot) since st (ChangedTo). False when st is to.
func (st *ControlState) Moved(to *ControlState, sl *Slots) bool {
	if st == to {
		return false
	}
	for _, q := range st.ChangedTo(to) {
		if sl.Has(q) {
			return true
		}
	}
	return false
}

// Changed is closed when a newer state is stored (Supersede).
func (st *ControlState) Changed() <-chan struct{} { return st.changed }

// Supersede says a newer state is stored: Changed is closed. Called once,
// by the control loop.
func (st *ControlState) Supersede() { close(st.changed) }

// Control is the control loop as the plan asks it: whether the proxy's lease
// on a node is valid, and which state is in force (a command counted under
// a state that is no longer in force is decided again).
type Control interface {
	Leased(u *upstream.Upstream, now time.Time) bool
	Current() *ControlState
}

// admit admits a step under the view's control state, by the queues of its
// keys (and, at EXEC, of what the transaction queued): counted in flight in
// that state (sp.Admitted), or sp.Wait with the queue that may not be sent
// (refused with TRYAGAIN once the command waited out the hold: WaitedOut).
// sp.Stale when the state changed meanwhile: nothing is counted and the
// command is decided again under the new one.
func admit(in *Input, sp *Step) {
	qs := in.Bufs.admitted(sp)
	if sp.Exec {
		// The queued commands leave now, whatever round queued them.
		qs = in.Bind.Tx.appendQueues(qs)
		in.Bufs.admit = qs
	}
	if len(qs) == 0 {
		return
	}
	v := in.View
	st := v.Ctl
	if q, up := blocked(v, qs); q != nil {
		if sp.WaitedOut {
			refuseHeld(&sp.Decision, q, up, in.State.InMulti)
			sp.Up = nil
			return
		}
		sp.Wait = true
		return
	}
	for _, q := range qs {
		sp.Slots.Add(q)
	}
	st.count(&sp.Slots, 1)
	if v.Loop.Current() != st {
		st.count(&sp.Slots, -1) // a new state came in between: admit under it
		sp.Slots = Slots{}
		sp.Stale = true
		return
	}
	sp.Admitted = st
}

// blocked returns the first of qs that may not be sent under the view's
// control state: a held queue (up nil), or a queue routed to a node whose
// lease is not valid (up is that node).
func blocked(v *View, qs [][]byte) (q []byte, up *upstream.Upstream) {
	var now time.Time
	r := v.Routes
	for _, q := range qs {
		if v.Ctl.Held[string(q)] {
			return q, nil
		}
		u := r.ForQueue(q)
		if now.IsZero() {
			now = time.Now()
		}
		if !v.Loop.Leased(u, now) {
			return q, u
		}
	}
	return nil, nil
}

// refuseHeld turns d into the TRYAGAIN refusal of a command for queue q,
// held (up nil) or on a node whose lease lapsed (up), decided inside MULTI
// or not.
func refuseHeld(d *rewrite.Decision, q []byte, up *upstream.Upstream, inMulti bool) {
	text := "queue " + string(q) + " is moving"
	if up != nil {
		text = "queue " + string(q) + " has no lease on upstream " + up.Name()
	}
	refuseWith(d, clienterr.TryAgain, text, ReasonHeld, inMulti)
}

// refuseWith turns d into a refusal the proxy decides from its command
// tables, its routes or the control table (of kind FENCE, EMQREFUSED,
// CROSSROUTE or TRYAGAIN), with the error's detail and reason, keeping
// what the audit record needs; inside MULTI it discards the transaction,
// and a refused EXEC ends it.
func refuseWith(d *rewrite.Decision, kind clienterr.Kind, detail string, reason rewrite.Reason, inMulti bool) {
	exec := d.Effect == rewrite.Exec
	*d = rewrite.Decision{Action: rewrite.Refuse, Reason: reason,
		Reply: clienterr.Reply(clienterr.New(kind, detail)), Script: d.Script, SHA: d.SHA, Queue: d.Queue}
	switch {
	case exec:
		d.Effect = rewrite.Discard // a refused EXEC ends the transaction, as the server's
	case inMulti:
		d.Effect = rewrite.AbortMulti
	}
}
