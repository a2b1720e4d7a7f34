// Package segment holds the commands a session sends before it awaits any
// of their replies, and puts the replies back in the client's order.
//
// A segment is one batch (pipe.Batch) per upstream connection it uses (a
// Part): a client batch whose commands all go to one shared connection is
// one part; a pipeline whose commands route to several upstreams has one
// part per upstream, sent concurrently. Each command has a reply Slot, in
// command order: a forwarded command's names its part and its place in that
// part's replies, a reply the proxy makes itself is kept in the segment
// (Local). Emit moves every reply, in that order, to the client's output,
// byte for byte, with no copy when the one part's replies are the whole
// answer (Simple). A reply the client does not get (CLIENT REPLY) that
// the pipe marked lost (pipe.Batch.ReplyLost: its connection broke in
// flight) makes Emit say the client must be closed, as the reply would
// have told it the outcome is unknown.
//
// The session (package session) decides what goes in a segment and when
// it is sent, on what connection, with what retries; this package only
// keeps it and orders its replies, and does no I/O.
package segment
