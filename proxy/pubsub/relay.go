package pubsub

import (
	"bytes"
	"errors"
	"os"
	"time"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The server-to-client half: the relay goroutine frames what the upstream
// sends and hands it on in order, the writer goroutine sends it to the
// client, as many bytes per write as are waiting.
// relayChunk is how many reply bytes the relay gathers before handing them
// to the client writer while more are already buffered.
const relayChunk = 64 * 1024

// drain lets the writer send what it holds and stop, and waits for it.
func (sub *Subscriber) drain() {
	sub.mu.Lock()
	sub.finish = true
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
	<-sub.wrote
}

// relay frames the server's output and hands it to the writer in order,
// until the connection ends, the client is over its limit, or a barrier
// says to stop.
func (sub *Subscriber) relay() {
	defer close(sub.Ended)
	var chunk []byte
	for {
		start := len(chunk)
		var over bool
		var err error
		chunk, over, err = sub.rr.Read(chunk, sub.max)
		if err != nil {
			if sub.Publish(chunk[:start]) {
				sub.err = err
			}
			return
		}
		if sub.acct.Refused {
			sub.err = errSubscriberBudget
			return
		}
		if over {
			sub.err = errSubscriberBytes
			return
		}
		fr := chunk[start:]
		if fr[0] != '>' && sub.swapN.Load() > 0 {
			// A reply the proxy answers in its place, patches or taps
			// (bridged RESP3, see Tap).
			t := sub.nextSwap()
			if t.Nested {
				sub.c.Subs.noteNested(fr, sub.RESP3)
			}
			chunk = append(chunk[:start], t.apply(fr)...)
			fr = chunk[start:]
			if len(fr) == 0 {
				continue
			}
		}
		if sub.barrierOut.Load() && (bytes.Equal(fr, sub.pongSub) || bytes.Equal(fr, sub.pongPlain)) {
			// A bridged RESP3 client stays bridged: the barrier only
			// orders (RESP3 answers PING alike in both modes).
			subscribed := fr[0] == '*' || sub.RESP3
			if !sub.Publish(chunk[:start]) {
				return
			}
			chunk = sub.handedOn(chunk)
			sub.barrierOut.Store(false)
			// Read before the session learns the outcome: once it does, it
			// may set stopAfter for its next barrier.
			stop := !subscribed || sub.stopAfter.Load()
			sub.barrier <- subscribed
			if stop {
				return
			}
			continue
		}
		if !sub.RESP3 && (fr[0] == '-' || leftAll(fr)) {
			select {
			case sub.Hint <- struct{}{}:
			default:
			}
		}
		sub.c.Subs.note(fr, sub.RESP3)
		if sub.w.Muted.Load() && sub.silenced(fr) {
			chunk = chunk[:start] // CLIENT REPLY OFF or SKIP
		}
		if sub.rr.Buffered() == 0 || len(chunk) >= relayChunk {
			if !sub.Publish(chunk) {
				return
			}
			chunk = sub.handedOn(chunk)
		}
	}
}

// Publish hands bytes to the writer (the bridge's: a leg's relay shares
// it); false (with sub.err set) when the client is over its limit
// or gone.
func (sub *Subscriber) Publish(b []byte) bool {
	if err := sub.w.push(b); err != nil {
		sub.err = err
		return false
	}
	return true
}

// push hands bytes to the writer; an error when the client is over its
// limit or gone.
func (sub *Subscriber) push(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	sub.mu.Lock()
	if sub.finish {
		sub.mu.Unlock()
		return errSubscriberGone
	}
	if len(sub.pending)+len(b) > sub.max {
		sub.mu.Unlock()
		return errSubscriberBytes
	}
	if want := int64(len(sub.pending) + len(b) - resp.FreeReplyBytes); want > sub.pendHeld {
		// The bytes waiting for the client come from the memory budget.
		if !sub.c.Mem.TryTake(want - sub.pendHeld) {
			sub.mu.Unlock()
			return errSubscriberBudget
		}
		sub.pendHeld = want
	}
	sub.pending = append(sub.pending, b...)
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
	return nil
}

// write sends the relayed bytes to the client, as many as are waiting per
// write, until drained or a write fails (then the client is closed).
func (sub *Subscriber) write() {
	defer close(sub.wrote)
	c := sub.c
	for {
		sub.mu.Lock()
		b, finish := sub.pending, sub.finish
		held := sub.pendHeld
		if len(b) > 0 { // swap buffers: the relay appends to the other one
			sub.pending, sub.spare = sub.spare[:0], nil
			sub.pendHeld = 0
		}
		sub.mu.Unlock()
		if len(b) == 0 {
			if finish {
				return
			}
			<-sub.wake
			continue
		}
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.WriteTimeout))
		_, err := c.Conn.Write(b)
		c.Mem.Give(held) // what b held of the memory budget
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.Met.Reject("write")
			}
			sub.werr = err
			sub.mu.Lock()
			sub.finish = true
			sub.pending = nil
			c.Mem.Give(sub.pendHeld)
			sub.pendHeld = 0
			sub.mu.Unlock()
			_ = c.Conn.Close() // the session's read fails and it ends
			return
		}
		if cap(b) > 4*relayChunk {
			b = nil // do not keep a burst's buffer around
		}
		sub.mu.Lock()
		sub.spare = b[:0]
		sub.mu.Unlock()
	}
}

// handedOn empties the relay's chunk once its bytes were handed to the
// writer, releasing what it held of the memory budget (a large one is let
// go).
func (sub *Subscriber) handedOn(chunk []byte) []byte {
	sub.c.Mem.Give(sub.acct.Held)
	sub.acct.Held = 0
	if cap(chunk) > pipe.KeptBatchBuf {
		return nil
	}
	return chunk[:0]
}

// leftAll reports whether a reply is an unsubscribe confirmation with a
// count of 0: `*3\r\n$11\r\nunsubscribe\r\n...:0\r\n` (or punsubscribe,
// sunsubscribe).
func leftAll(r []byte) bool {
	if !bytes.HasSuffix(r, []byte("\r\n:0\r\n")) {
		return false
	}
	return bytes.HasPrefix(r, []byte("*3\r\n$11\r\nunsubscribe\r\n")) ||
		bytes.HasPrefix(r, []byte("*3\r\n$12\r\npunsubscribe\r\n")) ||
		bytes.HasPrefix(r, []byte("*3\r\n$12\r\nsunsubscribe\r\n"))
}

// Add appends a command for the server to *out (encoded as d says; nil:
// as the client sent it). A large one is not copied: what *out holds is
// sent, then the command from the client's read buffer.
func (sub *Subscriber) Add(out *[]byte, f resp.Frame, d *rewrite.Decision) error {
	if d == nil {
		d = &rewrite.Decision{Action: rewrite.Pass}
	}
	if len(f.Raw) < pipe.RefMin {
		*out = pipe.Encode(*out, f, d)
		return nil
	}
	tail := f.Raw
	if d.Action == rewrite.Rewrite {
		*out = pipe.EncodeHead(*out, f, d)
		tail = f.TailFrom(d.Replace)
	}
	if err := sub.Send(*out); err != nil {
		return err
	}
	*out = (*out)[:0]
	return sub.Send(tail)
}
