package session

import (
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The session's side of writes confirmed by replicas: which forwarded
// commands are writes, and the segment's batches settled once their
// replies are in (the upstream's side is upstream/ack.go).

// noteWrite records the command about to be added to b (as reply b.n)
// as a write when it is one.
func (s *session) noteWrite(b *pipe.Batch, args [][]byte, sp *plan.Step) {
	if isWrite(args, sp) {
		b.Writes = append(b.Writes, b.N)
	}
}

// isWrite reports whether a forwarded command writes (see above).
func isWrite(args [][]byte, sp *plan.Step) bool {
	d := &sp.Decision
	if sp.Script {
		if d.Script != nil {
			return d.Script.Verb != ""
		}
		ro := rewrite.EqualFold(args[0], "EVALSHA_RO") || rewrite.EqualFold(args[0], "EVAL_RO") || d.Head == "EVALSHA_RO" || d.Head == "EVAL_RO"
		return !ro
	}
	return sp.Entry != nil && sp.Entry.Traits&cmdtable.TraitWrite != 0
}

// settleAcks takes WAIT's reply out of every batch of the segment that
// ends with one, and answers its writes as WAIT says (see above).
func (s *session) settleAcks() {
	for i := range s.parts {
		pt := &s.parts[i]
		if pt.up.Acks() {
			if n := pt.up.Settle(pt.b); n > 0 {
				s.srv.Met.Unacked.WithLabelValues(pt.up.Name()).Add(float64(n))
			}
		}
	}
}
