// Package upstream holds a proxy's connections to one upstream node and
// nothing of its clients: the shared pipelined connections that carry many
// clients' batches (Pipe, Batch), kept connected in the background and
// fenced on connect (the OnConnect hook runs on every connection before it
// carries a client byte; a periodic probe re-runs it and closes every
// connection of an upstream whose fence fails); the connections of one
// client each it hands out (WATCH pins, blocking commands, subscribers:
// Own, Dedicated, BlockingPipe, IsolatedPipe), kept in a registry so a
// failed fence closes them too; a Sentinel master set's primary followed
// across failovers; the writes confirmed by replicas (one WAIT per write
// to the node: AckBatch, Settle); the encoding of a forwarded command (the
// client's bytes, a rewritten head over the client's tail, a large command
// written from the client's read buffer without a copy); and what the node
// answers that the proxy repeats (its HELLO reply, the unsubscribe family
// outside subscribe mode).
//
// A batch's replies are exact bytes as the node sent them, framed by
// resp.Reader and charged to the memory budget through the batch's
// resp.Account; a batch whose connection breaks gets explicit errors for
// the replies it lacks, and nothing is ever sent twice. What the batches
// hold and in which order the client sees the replies is the session's
// (package proxy): this package imports proxy/resp, proxy/cmdtable,
// proxy/deadline, rewrite (a Decision to encode, NoSub), fence and
// discovery, never proxy. It reports through the Metrics interface the
// proxy implements.
package upstream
