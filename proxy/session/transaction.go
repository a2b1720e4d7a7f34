package session

import (
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/segment"
	"github.com/emqproxy/emqproxy/proxy/txn"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
)

// A transaction (package txn's Tx) is queued by the session: each queued
// command's reply is the one Queue gives, in its slot, and EXEC sends
// MULTI, the queued commands and EXEC as one unit, in one batch on one
// upstream connection; the client has +QUEUED for each as it is queued
// and, at EXEC, only EXEC's reply.
//
// When MULTI, the queued commands and EXEC arrive in the same segment, the
// local +OK/+QUEUED replies are replaced by the server's own replies to
// MULTI and each queued command, so the client sees exactly what the server
// said. Otherwise the server's replies to MULTI and the queued commands are
// read and dropped.

// txQueue queues a command decided inside MULTI in the transaction
// (txn.Tx.Queue), for either carrier (command.go), and notes what that
// did: a refusal for the memory budget, an aborted transaction.
func (s *session) txQueue(c *command) txn.Outcome {
	o := s.tx.Queue(c.f, &c.sp, s.st.MultiAborted)
	if o.OverBudget {
		s.srv.Met.Refusals.WithLabelValues(pubsub.ReasonMemoryBudget).Inc()
	}
	s.st.MultiAborted = s.st.MultiAborted || o.Abort
	return o
}

// queued puts the reply of a command queued in MULTI (o, txQueue's) in
// its slot.
func (w *inSegment) queued(c *command, o txn.Outcome) error {
	s := w.s
	s.seg.AddLocal(o.Reply, c.audit, c.drop)
	if o.Queued {
		s.seg.Slots[len(s.seg.Slots)-1].Target = c.up(s)
		s.tx.Slots = append(s.tx.Slots, len(s.seg.Slots)-1)
	}
	return nil
}

// exec adds MULTI, the queued commands and EXEC (c) to the segment as one
// unit, in one batch on one upstream connection.
func (w *inSegment) exec(c *command) error {
	w.s.exec(c)
	return nil
}

// exec adds the transaction to the segment (inSegment's exec).
func (s *session) exec(c *command) {
	t := &s.tx
	f, audit := c.f, c.audit
	defer s.loadAfterExec() // last: the transaction is over by then
	defer s.endMulti()      // EXEC ends the WATCH too
	u := c.up(s)
	own := s.pinned == nil && s.shareBefore(len(t.Buf)+len(f.Raw), t.N+2)
	if s.over {
		s.seg.AddLocal(nil, audit, c.drop) // past the reply cap: not sent, the client is closed (share.go)
		return
	}
	var p *pipe.Pipe
	var ded bool
	switch {
	case s.pinned != nil:
		if u.Fenced() && s.pinned.Failed() == nil { // else the fence failed since the WATCH
			p, ded = s.pinned, true
		}
	case own:
		p, ded = s.ownPipe(u), true // share.go: a heavy client's own connection
	default:
		if p = s.pipeOf(u, upstream.KindShared, s.proto(), nil); p == nil {
			p = s.pipeOf(u, upstream.KindAwaitShared, s.proto(), nil) // upstream/failover.go
		}
	}
	if p == nil {
		s.seg.AddLocal(u.Unavailable(), audit, c.drop)
		return
	}
	s.target(u, p, ded, own)
	b := s.seg.Parts[s.seg.Cur].B
	base := b.N
	if len(t.Buf) >= pipe.RefMin {
		// Sent as it is, not copied: the batch owns it now, with what it
		// holds of the memory budget (released once the replies are
		// written, after the batch is done).
		b.Refs = append(b.Refs, pipe.OutRef{At: len(b.Out), B: t.Hand()})
	} else {
		b.Out = append(b.Out, t.Buf...)
	}
	b.Out = append(b.Out, f.Raw...)
	if t.SameSegment {
		for j, si := range t.Slots {
			s.seg.Slots[si] = segment.Slot{Part: s.seg.Cur, Idx: base + j, Audit: s.seg.Slots[si].Audit, Target: u, Drop: s.seg.Slots[si].Drop}
		}
	}
	if u.Acks() && t.Writes {
		b.Writes = append(b.Writes, base+t.N+1) // acks.go: EXEC's reply waits for the replicas
	}
	b.N += t.N + 2
	s.seg.Slots = append(s.seg.Slots, segment.Slot{Part: s.seg.Cur, Idx: base + t.N + 1, Audit: audit, Target: u, Drop: c.drop})
	s.seg.Simple = false
	if len(t.Loads) > 0 {
		// The SCRIPT LOAD fan-out waits for EXEC's reply (flush): only
		// the loads the server ran go to the other upstreams, in the
		// next segment, before anything the client sends after EXEC.
		s.execLoad = &execLoad{part: s.seg.Cur, idx: base + t.N + 1, up: u, loads: t.Loads}
		t.Loads = nil
	}
}

// loadAfterExec sends the segment holding a transaction's EXEC when the
// transaction queued SCRIPT LOADs, and adds to the next segment the loads
// the server ran (see execLoad).
func (s *session) loadAfterExec() {
	if s.execLoad == nil {
		return
	}
	s.flush()
	s.execLoad.send(s)
	s.execLoad = nil
}

// execLoad is the SCRIPT LOAD fan-out of a transaction whose EXEC is in
// the current segment: the SCRIPT LOADs it queued, and where EXEC's reply
// is (part, idx) and which upstream ran it (up).
type execLoad struct {
	part, idx int
	up        *upstream.Upstream
	loads     []txn.Load
	reply     []byte // EXEC's reply, on the bridge (the relay's tap keeps it)
}

// read finds EXEC's reply in the segment's batches, before flush emits
// them.
func (e *execLoad) read(s *session) {
	pt := &s.seg.Parts[e.part]
	if !pt.Sent || pt.B.Over || e.idx >= len(pt.B.Ends) {
		e.loads = e.loads[:0]
		return
	}
	e.loads = txn.Ran(e.loads, pt.B.Reply(e.idx))
}

// send adds the loads the server ran to the current segment's part for
// every other upstream's shared connection (scriptload.go's
// loadEverywhere).
func (e *execLoad) send(s *session) {
	for _, l := range e.loads {
		s.loadEverywhere(resp.Frame{Raw: l.Raw}, e.up)
	}
}
