package pipe

import (
	"errors"
	"os"
	"time"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/deadline"
)

// The reader's work on a pipe (pipe.go): framing the replies of the
// batches in flight, in FIFO order, under the reply deadline, inline in a
// session (Pipe.lead) or in the reader goroutine (readLoop).

// waitReply waits until the next reply's first byte is there. A read
// deadline that passes is no timeout when nothing waits, or when a write
// since set one still ahead (idleTimeout).
func (p *Pipe) waitReply() error {
	for {
		err := p.rr.Wait()
		if err == nil || p.timeout == 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !p.idleTimeout() {
			return err
		}
	}
}

// readBatch reads b's missing replies.
func (p *Pipe) readBatch(b *Batch) error {
	for len(b.Ends) < b.onWire() {
		if err := p.waitReply(); err != nil {
			return err
		}
		var over bool
		var err error
		start := len(b.Replies)
		p.rr.Acct = &b.Acct
		b.Replies, over, err = p.rr.Read(b.Replies, b.Max)
		p.rr.Acct = nil
		if err != nil {
			return err
		}
		if p.onErr != nil && len(b.Replies) > start && b.Replies[start] == '-' {
			p.onErr(b.Replies[start:]) // failover.go: -READONLY, -LOADING
		}
		push := len(b.Replies) > start && b.Replies[start] == '>'
		if b.Acct.Refused {
			// Over the memory budget: read and dropped (package session's budget.go).
			b.Acct.Refused, over = false, false
			b.Acct.Dropped++
			b.Replies = b.Replies[:start]
			if !push {
				b.Replies = append(b.Replies, replyDroppedForBudget...)
			}
		}
		b.Over = b.Over || over
		if push {
			// A RESP3 push (DEBUG PROTOCOL push, say) is no reply: it
			// reaches the client before the reply that follows it.
			continue
		}
		b.Ends = append(b.Ends, len(b.Replies))
	}
	return nil
}

// front returns the oldest batch waiting for replies, or nil.
func (p *Pipe) front() *Batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.inflight) {
		return nil
	}
	return p.inflight[p.head]
}

// pop removes the oldest batch, which has all its replies, and pushes the
// read deadline on after that progress (lazily, see refreshDeadline).
// When nothing waits the deadline is left armed: if it passes while the
// connection is idle, the reader clears it (idleTimeout). It reports
// whether the caller took the writer's role to write the batches held
// behind the batch's WAIT (answered). The caller holds mu.
func (p *Pipe) pop() (flush bool) {
	if b := p.inflight[p.head]; b.WaitLen > 0 {
		flush = p.answered()
	}
	p.inflight[p.head].finished = true
	p.inflight[p.head] = nil
	p.head++
	if p.head == len(p.inflight) {
		p.inflight = p.inflight[:0]
		p.head = 0
	} else {
		if p.head > 1024 && p.head > len(p.inflight)/2 {
			n := copy(p.inflight, p.inflight[p.head:])
			clear(p.inflight[n:])
			p.inflight = p.inflight[:n]
			p.head = 0
		}
		if p.timeout > 0 {
			p.rdl = deadline.Refresh(p.nc.SetReadDeadline, p.rdl, p.timeout)
		}
	}
	return flush
}

// While a WAIT is in flight on a connection, a write batch that ends with
// a WAIT of its own (upstream's ack.go) is held in the queue, not written,
// until that WAIT is answered; then the held batches leave in one write
// with one WAIT (oneWait). The server serves a connection's commands in
// order, so whatever is written after a WAIT waits for the replicas'
// round trip anyway, and each WAIT written behind it would cost one more:
// at pipeline 1 the batches of a round come back one by one, and written
// as they come they made a WAIT per few calls (bench "ack_replicas 1":
// 0.23 WAIT per call at 50 clients). A queue of batches without a WAIT
// (reads, and writes of a connection whose replicas are short) is written
// at once, and the server reads it behind the WAIT as before; a queue
// that holds a batch with a WAIT is held whole, whatever is queued behind
// it too. (Package upstream sends a shared RESP2 connection's reads that
// would meet a WAIT on another connection.) A held batch is queued, never
// written, so a teardown answers it with the unavailable error.
//
// Invariant 2 (pipe.go) holds: a batch is held only while the batch with
// the WAIT is in flight, so the reader's role is held; whoever pops that
// batch takes the writer's role and writes the held ones (advance) before
// it answers anyone.

// Waiting reports whether a WAIT is in flight on the connection: a read
// written now would wait for it (package upstream's ack.go sends it on
// another connection).
func (p *Pipe) Waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitOut
}

// holdsWait reports whether a batch of q ends with a WAIT (to be held
// while another is in flight).
func holdsWait(q []*Batch) bool {
	for _, b := range q {
		if b.WaitLen > 0 {
			return true
		}
	}
	return false
}

// answered notes that the WAIT in flight was answered (its batch is being
// popped) and reports whether the caller took the writer's role to write
// the batches held behind it (advance). The caller holds mu.
func (p *Pipe) answered() bool {
	p.waitOut = false
	if p.writing || p.err != nil || len(p.queue) == 0 {
		return false
	}
	p.writing = true
	return true
}

// advance pops the oldest batch, whose replies are all read, and writes
// the batches held behind its WAIT when it had one (held). The caller
// holds the reader's role.
func (p *Pipe) advance() {
	p.mu.Lock()
	flush := p.pop()
	p.mu.Unlock()
	if flush {
		p.writeQueued(p.maxWrites)
	}
}

// idleTimeout reports whether a read deadline that passed while the reader
// waited for the next reply is no timeout: nothing was written yet (the
// deadline is then cleared; the next write sets a new one), or a write
// since set a deadline still ahead.
func (p *Pipe) idleTimeout() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.inflight) {
		p.rdl = time.Time{}
		_ = p.nc.SetReadDeadline(time.Time{})
		return true
	}
	return p.rdl.After(time.Now())
}

// readLoop is the reader goroutine of a bg connection: it frames replies
// and completes batches in FIFO order until the connection fails, then
// leaves the role to the teardown (release).
func (p *Pipe) readLoop() {
	for {
		var b *Batch
		err := p.waitReply()
		if err == nil {
			if b = p.front(); b == nil {
				err = errUnasked
			} else {
				err = p.readBatch(b)
			}
		}
		if err != nil {
			p.release(err)
			return
		}
		p.advance()
		p.complete(b, nil)
	}
}

// complete answers b, whose replies are all read and which was popped: a
// batch that rides on a later batch's WAIT waits for it; a batch whose
// WAIT others ride on answers them first (ack.go). It reports whether own
// (whose owner is the caller, which is never signaled) was answered.
func (p *Pipe) complete(b, own *Batch) (ownDone bool) {
	if b.carrier != nil {
		b.carrier.riders = append(b.carrier.riders, b)
		return false
	}
	for _, r := range b.riders {
		r.rideOn(b)
		if r == own {
			ownDone = true
		} else {
			r.signal()
		}
	}
	clear(b.riders)
	b.riders = b.riders[:0]
	if b == own {
		return true
	}
	b.signal()
	return ownDone
}

// oneWait leaves one WAIT in a write of the batches q: every batch that
// ends with its own WAIT (waitFull) but the last one has it taken out and
// rides on the last one's, which confirms every write sent before it on
// the connection (ack.go). It reports whether the write carries a WAIT.
// The caller holds the writer's role.
func oneWait(q []*Batch) bool {
	var carrier *Batch
	for i := len(q) - 1; i >= 0; i-- {
		b := q[i]
		if b.WaitLen == 0 {
			continue
		}
		if carrier == nil {
			carrier = b
			continue
		}
		b.Out = b.Out[:len(b.Out)-b.WaitLen]
		b.WaitLen = 0
		b.carrier = carrier
	}
	return carrier != nil
}

// replyDroppedForBudget replaces a reply that did not fit in the memory
// budget (the batch's Acct).
var replyDroppedForBudget = clienterr.Reply(errDroppedForBudget)
