// Package resp frames the RESP bytes of the data path, both ways, without
// decoding what it forwards.
//
// It owns: the client input framer (guard.go: Framer, its Limits and the
// protocol error replies, byte for byte as redis 7.0 frames and answers a
// client's input), and the upstream reply reader (reply.go: Reader, which
// cuts one complete reply's exact bytes off an upstream connection, RESP2
// and RESP3, under a size cap and a memory Budget's Account), with Decode,
// which turns a reply into a fence.Reply for the setup path of a connection
// (boot commands, fence checks), never for the data path.
//
// It must not: decode and re-encode a reply it forwards, allocate per
// command on the framing path, block on anything but the reader it was
// given, or know about sessions, upstreams or the budget's owner: the
// budget reaches it as the Budget interface, and whoever owns an Account
// gives its bytes back. The data path's packages above it (pipe,
// upstream, plan, txn, conn, session and the others, proxy/layers_test.go)
// use it; it imports no package of the data path, only rewrite (its
// integer parser, ParseInt, for the length lines) and fence (the Reply
// that Decode returns).
package resp
