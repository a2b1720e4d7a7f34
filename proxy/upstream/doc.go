// Package upstream holds a proxy's connections to one upstream node and
// nothing of its clients: the shared pipelined connections that carry
// many clients' batches (package pipe's Pipe and Batch), kept connected in
// the background and fenced on connect (the OnConnect hook runs on every
// connection before it carries a client byte; a periodic probe re-runs it
// and closes every connection of an upstream whose fence fails); the
// connections of one client each it hands out (WATCH pins, blocking
// commands, subscribers: Own, Dedicated, BlockingPipe, IsolatedPipe), kept
// in a registry so a failed fence closes them too; a Sentinel master set's
// primary followed across failovers; the writes confirmed by replicas (one
// WAIT per write to the node: AckBatch, Settle); and what the node answers
// that the proxy repeats (its HELLO reply, the unsubscribe family outside
// subscribe mode). Every connection a client's command travels on is asked
// of a Transport (transport.go; Via gives Direct, this package's methods,
// when none is set): the session's, the RESP3 bridge's legs and the RESP2
// tracking relays (package pubsub), the tracking client's shared
// connection (package tracking) and CLIENT UNBLOCK's (package clients).
// One request of a Kind per connection, which a test or another way to the
// servers replaces in one place.
//
// What the batches hold and in which order the client sees the replies is
// the session's (package session): this package imports proxy/pipe,
// proxy/cmdtable, resp, rewrite (NoSub), fence (its checks and Decode),
// discovery and netaddr, never a package above it. It reports through the Metrics
// interface, which package observe's Metrics implements.
package upstream
