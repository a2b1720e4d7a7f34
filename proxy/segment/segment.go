package segment

import (
	"github.com/emqproxy/emqproxy/proxy/conn"
	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// Segment is a session's current segment. Its zero value with Mem set and
// Simple true is empty.
type Segment struct {
	Mem    *limits.Budget // the batches' replies are charged to it
	Parts  []Part         // one batch per upstream connection
	Cur    int            // the part the command being added goes to
	Slots  []Slot         // the replies, in command order
	Local  []byte         // the local replies' bytes
	Simple bool           // one part, and every slot is its reply i, in order
	spare  []*pipe.Batch  // batches kept for reuse
}

// Part is the part of a segment bound for one connection.
type Part struct {
	Up   *upstream.Upstream
	P    *pipe.Pipe
	Ded  bool // P is the client's own connection
	Own  bool // P is an isolated client's own connection, read as a shared one
	B    *pipe.Batch
	Sent bool // B was queued on P (else it was answered with an error)
}

// Slot is one command's reply: local bytes, or a forwarded reply.
type Slot struct {
	Local  bool
	Lo, Hi int // a local reply: Local[Lo:Hi]
	Part   int // a forwarded reply: reply Idx of Parts[Part]
	Idx    int
	Patch  [][]byte           // the SCRIPT EXISTS arguments whose reply is patched
	Drop   bool               // the reply is not for the client (CLIENT REPLY)
	Audit  int                // its audit record (observe.Session), or -1
	Target *upstream.Upstream // for the audit record
	_      [0]func()          // not comparable
}

// Find returns the index of p's part, or -1 when the segment has none.
func (g *Segment) Find(p *pipe.Pipe) int {
	for i := range g.Parts {
		if g.Parts[i].P == p {
			return i
		}
	}
	return -1
}

// Apart reports whether a part for a new connection must be a segment of
// its own (the current one sent first): a dedicated connection (a WATCH
// pin, a blocking command's) never shares a segment with another one, so
// commands execute in the order the client sent them.
func (g *Segment) Apart(dedicated bool) bool {
	return len(g.Parts) > 0 && (dedicated || g.Parts[0].Ded)
}

// Add adds a part for p and returns its index.
func (g *Segment) Add(u *upstream.Upstream, p *pipe.Pipe, dedicated, own bool) int {
	if len(g.Parts) > 0 {
		g.Simple = false
	}
	g.Parts = append(g.Parts, Part{Up: u, P: p, Ded: dedicated, Own: own, B: g.newBatch()})
	return len(g.Parts) - 1
}

// newBatch returns an empty batch, reused when one is spare.
func (g *Segment) newBatch() *pipe.Batch {
	if n := len(g.spare); n > 0 {
		b := g.spare[n-1]
		g.spare = g.spare[:n-1]
		return b
	}
	b := pipe.NewBatch()
	b.Acct.Budget = g.Mem
	return b
}

// AddLocal adds a reply the proxy makes itself; drop: it is not for the
// client (CLIENT REPLY).
func (g *Segment) AddLocal(reply []byte, audit int, drop bool) {
	lo := len(g.Local)
	g.Local = append(g.Local, reply...)
	g.Slots = append(g.Slots, Slot{Local: true, Lo: lo, Hi: len(g.Local), Audit: audit, Drop: drop})
	g.Simple = false
}

// Forwarded adds the slot of the reply the current part's batch will get
// next (its B.N, which the caller counts once it encoded the command).
func (g *Segment) Forwarded(audit int, target *upstream.Upstream, drop bool, patch [][]byte) {
	b := g.Parts[g.Cur].B
	if patch != nil || drop || g.Cur != 0 || len(g.Slots) != b.N {
		g.Simple = false
	}
	g.Slots = append(g.Slots, Slot{Part: g.Cur, Idx: b.N, Audit: audit, Target: target, Drop: drop, Patch: patch})
}

// Emit moves the segment's replies to out's output in command order,
// noting each audited one on obs (its kind) and patching SCRIPT EXISTS
// replies under m. over: the output would pass maxReply (nothing is moved:
// the client is closed). closing: a reply the client does not get
// (CLIENT REPLY) says its outcome is unknown, so the client is closed as
// for a lost server connection. The caller gives back what the batches
// hold of the budget, then calls Reset.
func (g *Segment) Emit(out *conn.Conn, obs *observe.Session, m *shamap.Map, maxReply int64) (over, closing bool) {
	if int64(len(out.Out)+len(g.Local)) > maxReply {
		return true, false
	}
	if g.Simple && len(out.Out) == 0 && len(g.Parts) == 1 && len(g.Slots) == g.Parts[0].B.N {
		b := g.Parts[0].B
		if obs.Audits() {
			// Slot i is reply i: the records note their replies' kinds
			// from the batch, which then becomes the output as it is.
			for i := range g.Slots {
				if sl := &g.Slots[i]; sl.Audit >= 0 {
					obs.Reply(sl.Audit, b.Reply(i), upName(sl.Target))
				}
			}
		}
		// No copy: the replies are the output, and so is what they hold
		// of the budget.
		b.Replies = out.Adopt(b.Replies, b.Acct.Held)
		b.Acct.Held = 0
		return false, false
	}
	for i := range g.Slots {
		sl := &g.Slots[i]
		var r []byte
		if sl.Local {
			r = g.Local[sl.Lo:sl.Hi]
		} else {
			r = g.Parts[sl.Part].B.Reply(sl.Idx)
			if sl.Patch != nil {
				if p, err := rewrite.PatchScriptExists(r, sl.Patch, m); err == nil {
					r = p
				}
			}
		}
		if sl.Audit >= 0 {
			obs.Reply(sl.Audit, r, upName(sl.Target))
		}
		if sl.Drop { // CLIENT REPLY OFF or SKIP
			if !sl.Local && g.Parts[sl.Part].B.ReplyLost(sl.Idx) {
				closing = true
			}
			continue
		}
		out.Out = append(out.Out, r...)
	}
	out.HoldOutput() // the batches' bytes go once the caller gives them back
	return false, closing
}

// upName is u's name, or "" for none.
func upName(u *upstream.Upstream) string {
	if u == nil {
		return ""
	}
	return u.Name()
}

// Reset empties the segment, keeping its batches (reset) for reuse.
func (g *Segment) Reset() {
	for i := range g.Parts {
		g.Parts[i].B.Reset()
		g.spare = append(g.spare, g.Parts[i].B)
	}
	clear(g.Parts)
	g.Parts = g.Parts[:0]
	g.Cur = 0
	g.Slots = g.Slots[:0]
	g.Local = g.Local[:0]
	g.Simple = true
}

// Release gives back what the batches kept for reuse still hold of the
// budget (the session ends).
func (g *Segment) Release() {
	for _, b := range g.spare {
		g.Mem.Give(b.Acct.Held)
		b.Acct.Held = 0
	}
}
