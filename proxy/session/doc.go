// Package session serves one client connection: it reads the client's
// bytes, frames its commands (package resp), has each planned (package
// plan), forwards what is forwarded on the upstreams' connections
// (package upstream) in one batch per connection, and writes every reply
// back in command order, byte for byte as the server sent it. The
// connection's bytes are package conn's (a conn.Conn: the read buffer
// under the memory budget, its framing, blocking and watched reads, the
// output and its write under the write deadline); the session says when
// to read and under what read deadline, waits for its client and for
// something else at once (subscribe mode's events, a blocking command's
// reply) on the Conn's Reads, and acts on what ends it (counts and logs
// the rejection, answers a command larger than the budget). Its
// transactions, WATCH pins, blocking commands, what it does with its share
// of the shared connections (package limits' Share decides), CLIENT REPLY,
// the memory budget's waits and the limits on authentication are the
// session's; what a decision changes of the protocol state is rewrite's
// (rewrite.State.Apply). Subscribe mode is package
// pubsub's (a pubsub.Mode: its round, the RESP3 bridge's legs and
// barriers, the connections and relays), to which a session is a
// pubsub.Session: the session keeps the loop that serves it, the framing
// of the client's input for it, the CLIENT REPLY mode and the plan of a
// bridged RESP3 client's command (bridge.go). RESP2 client-side caching's
// glue is the session's, its tracking state, REDIRECT translation and
// answers package tracking's (a Tracker, given the values it needs: the
// session's id, the server's relays, the client as they know it, and
// whether a session is listed). CLIENT LIST, KILL and UNBLOCK of the proxy's own clients are package clients'
// answers, across the sessions: a Session is a clients.Client, and
// publishes what CLIENT LIST shows of it (clients.View) at the end of each
// batch.
//
// A session knows its server only as Shared: the bounds it serves under
// (Config), the values every session shares (the routes, the policy, the
// command tables, the capture, the metrics, the memory budget), the
// control loop (Control) and the other sessions (Registry, a
// clients.Registry of Sessions). Package proxy fills it and runs one
// Session per accepted connection.
package session
