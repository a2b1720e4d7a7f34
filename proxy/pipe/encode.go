package pipe

import (
	"net"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Large commands go upstream from the client's read buffer, never copied.
//
// A command of RefMin bytes or more was read into a buffer of its own,
// whose bytes the memory budget holds (package conn, package session's
// budget.go); a copy into the batch's output would hold them twice. So
// such a forwarded command is referenced by the batch (Batch.Encode adds
// an OutRef to Batch.Refs) and written from the read buffer, with the
// batch's other bytes around it in one vectored write; the session neither
// reads into nor moves that buffer before the batch is done (its replies
// are in, or the connection's teardown has waited for the write). A
// subscribed or bridged client's large command is not copied either: its
// connection's Subscriber.Add (package pubsub) sends what precedes it,
// then the command from the read buffer. A large transaction's queued
// commands (txn.Tx's Buf) go by reference too at EXEC (package session's
// transaction.go, exec).

// OutRef is a large command's bytes, sent after out[:at].
type OutRef struct {
	At int
	B  []byte
}

// RefMin is the size from which a forwarded command's bytes are sent from
// the client's read buffer rather than copied: a command that large was
// read into a buffer of its own (past the session's kept read buffer,
// which is this size), and a copy would double what it holds.
const RefMin = 64 * 1024

// KeptBatchBuf is the largest command or reply buffer a batch keeps for
// reuse; a bigger one (a large reply) is let go when the batch is reset.
const KeptBatchBuf = 4 * resp.DefaultMaxInline

// Encode appends a forwarded command (see the function Encode), its bytes
// by reference when it is large.
func (b *Batch) Encode(f resp.Frame, d *rewrite.Decision) {
	if len(f.Raw) < RefMin {
		b.Out = Encode(b.Out, f, d)
		return
	}
	tail := f.Raw
	if d.Action == rewrite.Rewrite {
		b.Out = EncodeHead(b.Out, f, d)
		tail = f.TailFrom(d.Replace)
	}
	b.Refs = append(b.Refs, OutRef{At: len(b.Out), B: tail})
}

// appendTo appends the batch's bytes, in order, to vec.
func (b *Batch) appendTo(vec net.Buffers) net.Buffers {
	at := 0
	for _, r := range b.Refs {
		if r.At > at {
			vec = append(vec, b.Out[at:r.At])
		}
		vec = append(vec, r.B)
		at = r.At
	}
	if at < len(b.Out) || len(b.Refs) == 0 {
		vec = append(vec, b.Out[at:])
	}
	return vec
}

// Encode appends a forwarded command's bytes to out: the client's bytes for
// Pass, a re-encoded head plus the client's tail bytes for Rewrite.
func Encode(out []byte, f resp.Frame, d *rewrite.Decision) []byte {
	if d.Action != rewrite.Rewrite {
		return append(out, f.Raw...)
	}
	return append(EncodeHead(out, f, d), f.TailFrom(d.Replace)...)
}

// EncodeHead appends a rewritten command's head: its array header and
// its new name, which the client's tail bytes follow.
func EncodeHead(out []byte, f resp.Frame, d *rewrite.Decision) []byte {
	tail := max(len(f.Args)-d.Replace, 0)
	out = resp.AppendArray(out, 1+tail)
	return resp.AppendBulkString(out, d.Head)
}
