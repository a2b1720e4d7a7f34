// Package pubsub is the machinery of a client's connections of its own
// that carry pushes: subscribe mode's connection, the RESP3 bridge's legs,
// and the relays of RESP2 client-side caching's redirects.
//
// A Subscriber is one such connection: its relay goroutine frames what
// the server sends (never decoding it) and hands it on in order, its
// writer goroutine sends it to the client, as many bytes per write as are
// waiting; the session's goroutine sends the client's commands on it and
// orders the proxy's own replies among the server's with a barrier (a
// PING, or CLIENT GETNAME on a bridge, carrying a random nonce). A bridge's
// legs are Subscribers whose relays hand on to the first one's writer.
// Redirects is the server's registry of the sessions that can be pushed
// to and of the relays (RedirConn) that carry invalidations to them.
//
// The session's side (the loop that reads the client in subscribe mode,
// the plan of a bridged command) is package session's, RESP2 CLIENT
// TRACKING package tracking's: this package knows a session only as a
// Client, the few values its goroutines need (the client's connection,
// the memory budget, the metrics it counts into, the subscription counts
// CLIENT LIST shows).
package pubsub
