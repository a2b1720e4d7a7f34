package proxy

// A batch is one client's forwarded commands on one upstream connection:
// sent on a pipe, completed by whoever holds the pipe's reader role, and
// reused by its session once done (pipeline.go).

// sig is what a batch's owner is woken with.
type sig uint8

const (
	sigDone sig = iota + 1 // every reply is there
	sigLead                // the owner now holds the reader's role (pipe.lead)
)

// batch is one client's forwarded commands: their encoded bytes and the
// replies they collect. The session owns it except between send and done:
// then only the pipelined connection touches it.
type batch struct {
	out []byte // the encoded commands, as they go to the upstream
	// refs are large commands' bytes sent from the client's read buffer
	// without a copy, each after out[:at] (see encode): the session
	// neither reads into nor moves that buffer before the batch is done.
	refs []outRef
	n    int // how many replies the commands produce

	replies  []byte // the replies' exact bytes, concatenated
	ends     []int  // ends[i] is where reply i ends in replies
	max      int    // cap on len(replies); past it the rest is discarded
	over     bool   // the cap was hit; the client is closed
	lost     bool   // some replies are errors made by the proxy
	finished bool   // every reply is there (under the pipe's mu)

	acct replyAcct // the replies' bytes taken from the memory budget (budget.go)

	// writes are the indexes of the replies that wait for the replicas,
	// and wait tells whether (and how) the batch ends with the proxy's
	// WAIT (ack.go).
	writes []int
	wait   uint8
	// waitLen is the size of the WAIT at the end of out (waitFull). In a
	// write of several batches only the last one keeps its WAIT: the
	// others ride on it (carrier), their WAIT taken out of out, and take a
	// copy of its reply as their last (riders; pipe.oneWait, ack.go).
	waitLen int
	carrier *batch
	riders  []*batch

	done chan sig // one signal at a time: sigDone once, sigLead before it
}

// newBatch returns an empty batch with its signal channel.
func newBatch() *batch { return &batch{done: make(chan sig, 1)} }

// reset empties the batch for reuse, keeping its buffers.
func (b *batch) reset() {
	b.out = b.out[:0]
	if cap(b.out) > keptBatchBuf {
		b.out = nil
	}
	clear(b.refs) // the client's read buffer may go
	b.refs = b.refs[:0]
	b.n = 0
	b.replies = b.replies[:0]
	if cap(b.replies) > keptBatchBuf {
		b.replies = nil
	}
	b.ends = b.ends[:0]
	b.over, b.lost, b.finished = false, false, false
	b.writes, b.wait = b.writes[:0], waitNone
	b.waitLen, b.carrier = 0, nil
}

// reply returns the bytes of reply i.
func (b *batch) reply(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.replies[start:b.ends[i]]
}

// fill answers every missing reply with msg (a complete RESP error).
func (b *batch) fill(msg []byte) {
	for len(b.ends) < b.n {
		if !b.over {
			b.replies = append(b.replies, msg...)
		}
		b.ends = append(b.ends, len(b.replies))
	}
	b.lost = true
}

// onWire is how many of the batch's replies come from its connection: all
// but the WAIT it rides on (a carrier's, copied in by rideOn).
func (b *batch) onWire() int {
	if b.carrier != nil {
		return b.n - 1
	}
	return b.n
}

// rideOn completes a batch that rode on carrier's WAIT with a copy of that
// WAIT's reply, as if it had sent its own (ack.go settles it the same way).
func (b *batch) rideOn(carrier *batch) {
	b.carrier = nil
	if !b.over {
		b.replies = append(b.replies, carrier.reply(carrier.n-1)...)
	}
	b.ends = append(b.ends, len(b.replies))
}

// signal wakes the session waiting on the batch: every reply is there.
func (b *batch) signal() { b.done <- sigDone }
