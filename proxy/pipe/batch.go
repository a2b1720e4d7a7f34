package pipe

import "github.com/emqproxy/emqproxy/resp"

// A batch is one client's forwarded commands on one upstream connection:
// sent on a pipe, completed by whoever holds the pipe's reader role, and
// reused by its session once done (pipe.go).

// sig is what a batch's owner is woken with.
type sig uint8

const (
	sigDone sig = iota + 1 // every reply is there
	sigLead                // the owner now holds the reader's role (Pipe.lead)
)

// Batch is one client's forwarded commands: their encoded bytes and the
// replies they collect. The session owns it except between send and done:
// then only the pipelined connection touches it.
type Batch struct {
	Out []byte // the encoded commands, as they go to the upstream
	// Refs are large commands' bytes sent from the client's read buffer
	// without a copy, each after out[:at] (see encode): the session
	// neither reads into nor moves that buffer before the batch is done.
	Refs []OutRef
	N    int // how many replies the commands produce

	Replies  []byte // the replies' exact bytes, concatenated
	Ends     []int  // ends[i] is where reply i ends in replies
	Max      int    // cap on len(replies); past it the rest is discarded
	Over     bool   // the cap was hit; the client is closed
	Lost     bool   // some replies are errors made by the proxy
	finished bool   // every reply is there (under the pipe's mu)
	// lostFrom is one more than the index of the first reply FillLost
	// made (the command was written, its connection broke before the
	// reply came); 0 when none is.
	lostFrom int

	Acct resp.Account // what the replies hold of the memory budget; its owner gives it back

	// Writes are the indexes of the replies that wait for the replicas,
	// and Ack tells whether (and how) the batch ends with a WAIT: package
	// upstream's to set and read (its ack.go), 0 when it does not.
	// WaitLen is the size of the WAIT at the end of Out (a WAIT the
	// connection may share). In a write of several batches only the last
	// one keeps its WAIT: the others ride on it (carrier), their WAIT taken
	// out of Out, and take a copy of its reply as their last (riders;
	// oneWait).
	Writes  []int
	Ack     uint8
	WaitLen int
	carrier *Batch
	riders  []*Batch

	Done chan sig // one signal at a time: sigDone once, sigLead before it
}

// NewBatch returns an empty batch with its signal channel.
func NewBatch() *Batch { return &Batch{Done: make(chan sig, 1)} }

// Reset empties the batch for reuse, keeping its buffers.
func (b *Batch) Reset() {
	b.Out = b.Out[:0]
	if cap(b.Out) > KeptBatchBuf {
		b.Out = nil
	}
	clear(b.Refs) // the client's read buffer may go
	b.Refs = b.Refs[:0]
	b.N = 0
	b.Replies = b.Replies[:0]
	if cap(b.Replies) > KeptBatchBuf {
		b.Replies = nil
	}
	b.Ends = b.Ends[:0]
	b.Over, b.Lost, b.finished, b.lostFrom = false, false, false, 0
	b.Writes, b.Ack = b.Writes[:0], 0
	b.WaitLen, b.carrier = 0, nil
}

// Reply returns the bytes of reply i.
func (b *Batch) Reply(i int) []byte {
	start := 0
	if i > 0 {
		start = b.Ends[i-1]
	}
	return b.Replies[start:b.Ends[i]]
}

// Fill answers every missing reply with msg (a complete RESP error).
func (b *Batch) Fill(msg []byte) {
	for len(b.Ends) < b.N {
		if !b.Over {
			b.Replies = append(b.Replies, msg...)
		}
		b.Ends = append(b.Ends, len(b.Replies))
	}
	b.Lost = true
}

// FillLost answers every missing reply with msg, the error of a command
// written on a connection that broke before its reply came (the pipe's
// teardown), and marks those replies so (ReplyLost).
func (b *Batch) FillLost(msg []byte) {
	if len(b.Ends) < b.N {
		b.lostFrom = len(b.Ends) + 1
	}
	b.Fill(msg)
}

// ReplyLost reports whether reply i is FillLost's error: the command was
// written, its connection broke before the reply came, and it may have
// been applied.
func (b *Batch) ReplyLost(i int) bool { return b.lostFrom > 0 && i >= b.lostFrom-1 }

// onWire is how many of the batch's replies come from its connection: all
// but the WAIT it rides on (a carrier's, copied in by rideOn).
func (b *Batch) onWire() int {
	if b.carrier != nil {
		return b.N - 1
	}
	return b.N
}

// rideOn completes a batch that rode on carrier's WAIT with a copy of that
// WAIT's reply, as if it had sent its own (ack.go settles it the same way).
func (b *Batch) rideOn(carrier *Batch) {
	b.carrier = nil
	if !b.Over {
		b.Replies = append(b.Replies, carrier.Reply(carrier.N-1)...)
	}
	b.Ends = append(b.Ends, len(b.Replies))
}

// signal wakes the session waiting on the batch: every reply is there.
func (b *Batch) signal() { b.Done <- sigDone }
