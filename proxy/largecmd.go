package proxy

import (
	"net"

	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Large commands go upstream from the client's read buffer, never copied.
//
// A command larger than keptReadBuf was read into a buffer of its own,
// whose bytes the memory budget holds (budget.go); a copy into the
// batch's output would hold them twice. So a forwarded command from refMin
// on is referenced by the batch (outRef) and written from the read buffer,
// with the batch's other bytes around it in one vectored write; the
// session neither reads into nor moves that buffer before the batch is
// done (its replies are in, or the connection's teardown has waited for
// the write). A subscribed or bridged client's large command is written
// the same way (subscriber.add), and a large transaction's queued
// commands at EXEC (transaction.exec).

// outRef is a large command's bytes, sent after out[:at].
type outRef struct {
	at int
	b  []byte
}

// refMin is the size from which a forwarded command's bytes are sent from
// the client's read buffer rather than copied: a command that large was
// read into a buffer of its own (past keptReadBuf), and a copy would
// double what it holds.
const refMin = keptReadBuf

// keptBatchBuf is the largest command or reply buffer a batch keeps for
// reuse; a bigger one (a large reply) is let go when the batch is reset.
const keptBatchBuf = 4 * DefaultMaxInline

// encode appends a forwarded command (see the function encode), its bytes
// by reference when it is large.
func (b *batch) encode(f resp.Frame, d *rewrite.Decision) {
	if len(f.Raw) < refMin {
		b.out = encode(b.out, f, d)
		return
	}
	tail := f.Raw
	if d.Action == rewrite.Rewrite {
		b.out = encodeHead(b.out, f, d)
		tail = f.TailFrom(d.Replace)
	}
	b.refs = append(b.refs, outRef{at: len(b.out), b: tail})
}

// appendTo appends the batch's bytes, in order, to vec.
func (b *batch) appendTo(vec net.Buffers) net.Buffers {
	at := 0
	for _, r := range b.refs {
		if r.at > at {
			vec = append(vec, b.out[at:r.at])
		}
		vec = append(vec, r.b)
		at = r.at
	}
	if at < len(b.out) || len(b.refs) == 0 {
		vec = append(vec, b.out[at:])
	}
	return vec
}
