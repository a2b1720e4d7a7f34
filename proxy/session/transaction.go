package session

import (
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Replies of the transaction machinery.
var (
	replyQueued     = []byte("+QUEUED\r\n")
	replyMultiHead  = []byte("*1\r\n$5\r\nMULTI\r\n")
	replyTxTooLarge = []byte("-ERR emqproxy: transaction too large; it will be discarded at EXEC\r\n")
)

// transaction is a MULTI being queued by the session. The queued commands
// (decided, rewritten where decided) are kept encoded and sent at EXEC as
// one unit, MULTI ... EXEC, in one batch on one upstream connection; the
// client gets +QUEUED for each as it is queued and, at EXEC, only EXEC's
// reply.
//
// When MULTI, the queued commands and EXEC arrive in the same segment, the
// local +OK/+QUEUED replies are replaced by the server's own replies to
// MULTI and each queued command, so the client sees exactly what the server
// said. Otherwise the server's replies to MULTI and the queued commands are
// read and dropped. A command the server refuses at queue time (unknown,
// wrong arity, no-multi) is never queued: the proxy answers the server's
// error from its command table and EXEC answers EXECABORT (package plan's queuecheck.go).
// What that table cannot tell (the upstream user's ACL, say) gets +QUEUED,
// and EXEC the server's own answer.
type transaction struct {
	buf   []byte // MULTI and the queued commands, encoded
	n     int    // queued commands
	slots []int  // s.slots index of MULTI's and each queued command's reply
	// sameSegment is true while MULTI's reply slot is still in the
	// session's current segment (nothing flushed since).
	sameSegment bool
	// route is what the queued commands tell of the transaction's route
	// (the upstream it is bound to, their queues, their verb calls' role),
	// which the plan reads (package plan's TxRoute).
	route plan.TxRoute
	// held is what buf holds of the memory budget: its bytes past
	// txFreeBytes (budget.go).
	held int64
	// sent is what buf held when it was sent at EXEC (the batch owns
	// it), given back once the replies are written (releaseOutput).
	sent int64
	// writes: a queued command is a write, so EXEC's reply waits for the
	// replicas where the upstream asks for them (upstream/ack.go).
	writes bool
	// loads are the queued SCRIPT LOADs: once EXEC has run them, they go
	// to every other upstream as well (execLoads).
	loads []txLoad
}

// txLoad is a SCRIPT LOAD queued in a transaction: at is its place among
// the queued commands (its reply's in EXEC's array), raw its bytes (a
// copy).
type txLoad struct {
	at  int
	raw []byte
}

// txFreeBytes are the bytes of a transaction's queued commands not taken
// from the memory budget.
const txFreeBytes = 64 << 10

// begin starts a transaction; MULTI's local reply is the session's last slot.
func (t *transaction) begin(s *session) {
	t.buf = append(t.buf[:0], replyMultiHead...)
	t.n = 0
	t.slots = append(t.slots[:0], len(s.slots)-1)
	t.sameSegment = true
	t.forget()
}

// forget drops what the transaction knows of its routes.
func (t *transaction) forget() {
	t.route.Forget()
	t.writes = false
	clear(t.loads)
	t.loads = t.loads[:0]
}

// clear drops the transaction.
func (t *transaction) clear(s *session) {
	s.srv.Mem.Give(t.held)
	t.held = 0
	if cap(t.buf) > 1<<20 {
		t.buf = nil
	}
	t.buf = t.buf[:0]
	t.n = 0
	t.slots = t.slots[:0]
	t.sameSegment = false
	t.forget()
}

// queue adds a command decided inside MULTI.
func (t *transaction) queue(s *session, c *command) {
	f, d, audit := c.f, &c.sp.Decision, c.audit
	if d.Action == rewrite.Refuse {
		s.addLocal(d.Reply, audit, c.drop)
		if d.Effect == rewrite.AbortMulti {
			s.st.MultiAborted = true
		}
		return
	}
	if s.st.MultiAborted {
		// The transaction is discarded at EXEC anyway: keep nothing.
		s.addLocal(replyQueued, audit, c.drop)
		return
	}
	if t.n >= s.srv.Cfg.MaxQueuedMulti || int64(len(t.buf)+len(f.Raw)) > s.srv.Cfg.MaxReplyBytes {
		s.addLocal(replyTxTooLarge, audit, c.drop)
		s.st.MultiAborted = true
		return
	}
	if !t.room(s, f) {
		s.srv.Met.Refusals.WithLabelValues(pubsub.ReasonMemoryBudget).Inc()
		s.addLocal(replyTxOverBudget, audit, c.drop)
		s.st.MultiAborted = true
		return
	}
	t.noteLoad(f)
	t.buf = pipe.Encode(t.buf, f, d)
	t.n++
	if s.srv.Acking && !t.writes {
		t.writes = isWrite(f.Args, &c.sp) // acks.go
	}
	t.route.Note(&c.sp) // package plan: its binding, queues and verb role
	s.addLocal(replyQueued, audit, c.drop)
	s.slots[len(s.slots)-1].target = c.up(s)
	t.slots = append(t.slots, len(s.slots)-1)
	if d.Effect == rewrite.Wire6 {
		s.st.Wire6 = true
	}
}

// room takes from the memory budget the bytes f adds to buf past the free
// ones (a rewritten head is at most 64 bytes longer than the client's);
// false when the budget cannot give them.
func (t *transaction) room(s *session, f resp.Frame) bool {
	want := int64(len(t.buf) + len(f.Raw) + 64 - txFreeBytes)
	if want <= t.held {
		return true
	}
	if !s.srv.Mem.TryTake(want - t.held) {
		return false
	}
	t.held = want
	return true
}

// noteLoad notes a SCRIPT LOAD being queued (before t.n counts it). Only a
// forwarded one is queued: a verb body's, which the proxy answers itself,
// is refused inside MULTI.
func (t *transaction) noteLoad(f resp.Frame) {
	if isScriptLoad(f.Args) {
		t.loads = append(t.loads, txLoad{at: t.n, raw: append([]byte(nil), f.Raw...)})
	}
}

// exec sends MULTI, the queued commands and EXEC (f) as one unit.
func (t *transaction) exec(s *session, c *command) {
	f, audit := c.f, c.audit
	defer s.loadAfterExec() // last: the transaction is over by then
	defer func() {
		t.clear(s)
		s.st.InMulti, s.st.MultiAborted = false, false
		if s.pinned != nil {
			s.unpin = true // EXEC ends the WATCH
		}
	}()
	u := c.up(s)
	own := s.pinned == nil && s.shareBefore(len(t.buf)+len(f.Raw), t.n+2)
	if s.over {
		s.addLocal(nil, audit, c.drop) // past the reply cap: not sent, the client is closed (share.go)
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
		if p = u.Shared(s.id, s.proto()); p == nil {
			p = u.AwaitShared(s.srv.Ctx, s.id, s.proto(), nil) // upstream/failover.go
		}
	}
	if p == nil {
		s.addLocal(u.Unavailable(), audit, c.drop)
		return
	}
	s.target(u, p, ded, own)
	b := s.parts[s.cur].b
	base := b.N
	if len(t.buf) >= pipe.RefMin {
		// Sent as it is, not copied: the batch owns it now, with what it
		// holds of the memory budget (released once the replies are
		// written, after the batch is done).
		b.Refs = append(b.Refs, pipe.OutRef{At: len(b.Out), B: t.buf})
		t.buf = nil
		t.sent += t.held
		t.held = 0
	} else {
		b.Out = append(b.Out, t.buf...)
	}
	b.Out = append(b.Out, f.Raw...)
	if t.sameSegment {
		for j, si := range t.slots {
			s.slots[si] = rslot{part: s.cur, idx: base + j, audit: s.slots[si].audit, target: u, drop: s.slots[si].drop}
		}
	}
	if u.Acks() && t.writes {
		b.Writes = append(b.Writes, base+t.n+1) // acks.go: EXEC's reply waits for the replicas
	}
	b.N += t.n + 2
	s.slots = append(s.slots, rslot{part: s.cur, idx: base + t.n + 1, audit: audit, target: u, drop: c.drop})
	s.simple = false
	if len(t.loads) > 0 {
		// The SCRIPT LOAD fan-out waits for EXEC's reply (flush): only
		// the loads the server ran go to the other upstreams, in the
		// next segment, before anything the client sends after EXEC.
		s.execLoad = &execLoad{part: s.cur, idx: base + t.n + 1, up: u, loads: t.loads}
		t.loads = nil
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
	loads     []txLoad
	reply     []byte // EXEC's reply, on the bridge (the relay's tap keeps it)
}

// ran keeps the loads EXEC's reply shows the server ran: its array's
// element for each is the script's sha. A transaction the server
// discarded (EXECABORT, a WATCH that failed: not an array) ran none.
func (e *execLoad) ran(reply []byte) {
	rep, _, err := resp.Decode(reply)
	if err != nil || rep.Type != '*' || rep.Null {
		e.loads = e.loads[:0]
		return
	}
	kept := e.loads[:0]
	for _, l := range e.loads {
		if l.at < len(rep.Elems) && rep.Elems[l.at].Type == '$' && !rep.Elems[l.at].Null {
			kept = append(kept, l)
		}
	}
	e.loads = kept
}

// read finds EXEC's reply in the segment's batches, before flush emits
// them.
func (e *execLoad) read(s *session) {
	pt := &s.parts[e.part]
	if !pt.sent || pt.b.Over || e.idx >= len(pt.b.Ends) {
		e.loads = e.loads[:0]
		return
	}
	e.ran(pt.b.Reply(e.idx))
}

// send adds the loads the server ran to the current segment's part for
// every other upstream's shared connection (route_session.go's
// loadEverywhere).
func (e *execLoad) send(s *session) {
	for _, l := range e.loads {
		s.loadEverywhere(resp.Frame{Raw: l.raw}, e.up)
	}
}
