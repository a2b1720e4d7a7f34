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
// A Mode is a session's subscribe mode (mode.go): its Subscriber, the
// round that dispatches the commands the client sent (the subscribe
// family, PING, QUIT, RESET, and the barrier before any other), the
// bridge's legs (legs.go), the barriers that put the proxy's own replies
// in their place, the SKIP that silences a command, and the end of
// subscribe mode. It knows the session only as a Session, which package
// session implements with a few whole steps on its side: framing the
// client's next command from the session's buffer, the client's CLIENT
// REPLY mode, the plan of a bridged RESP3 client's command (the plan, the
// transaction, the audit records, all of which the plan changes, are the
// session's), and RESET. The session keeps its one loop, which calls
// Round, and the client read it waits on beside the Subscriber's events.
// RESP2 CLIENT TRACKING is package tracking's. The goroutines know the
// session only as a Client, the few values they need (the client's
// connection, the memory budget, the metrics it counts into, the
// subscription counts CLIENT LIST shows).
package pubsub
