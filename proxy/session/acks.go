package session

import (
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/plan"
)

// The session's side of writes confirmed by replicas: which forwarded
// commands are writes, and the segment's batches settled once their
// replies are in (the upstream's side is upstream/ack.go).

// noteWrite records the command about to be added to b (as reply b.n)
// as a write when it is one.
func (s *session) noteWrite(b *pipe.Batch, args [][]byte, sp *plan.Step) {
	if sp.IsWrite(args) {
		b.Writes = append(b.Writes, b.N)
	}
}

// settleAcks takes WAIT's reply out of every batch of the segment that
// ends with one, and answers its writes as WAIT says (see above).
func (s *session) settleAcks() {
	for i := range s.seg.Parts {
		pt := &s.seg.Parts[i]
		if pt.Up.Acks() {
			if n := pt.Up.Settle(pt.B); n > 0 {
				s.srv.Met.Unacked.WithLabelValues(pt.Up.Name()).Add(float64(n))
			}
		}
	}
}
