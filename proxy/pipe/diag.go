package pipe

import "time"

// What a Pipe shows of itself: read by the tests of the packages above,
// which watch the data path from outside this package.

// InFlight returns how many batches sent on p still wait for replies.
func (p *Pipe) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight) - p.head
}

// ReadDeadline returns the read deadline last armed on p; zero for none.
func (p *Pipe) ReadDeadline() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rdl
}
