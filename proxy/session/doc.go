// Package session serves one client connection: it reads the client's
// bytes, frames its commands (package resp), has each planned (package
// plan), forwards what is forwarded on the upstreams' connections
// (package upstream) in one batch per connection, and writes every reply
// back in command order, byte for byte as the server sent it.
//
// Every command, in normal service and on the RESP3 bridge, takes one path
// (command.go's serveCommand): planned and admitted, then queued in a
// transaction, sent with its EXEC, forwarded or answered by the proxy, and
// its effect made on the session (apply). How it travels is its carrier's:
// the round's segment in normal service (segment.go's inSegment), the
// legs and barriers of the bridge (bridge.go's onBridge).
//
// What the session decides, others keep:
//
//   - the connection's bytes are package conn's (a conn.Conn: the read
//     buffer under the memory budget, its framing, blocking and watched
//     reads, the output and its write); the session says when to read and
//     under what deadline, waits for its client and for something else at
//     once (subscribe mode's events, a blocking command's reply) on the
//     Conn's Reads, and acts on what ends it;
//   - a segment's batches and the order of their replies are package
//     segment's; the session chooses each command's connection (the
//     shared one, a WATCH pin, a blocking command's, an isolated client's
//     own), sends the segment (flush) and retries what was never written;
//     it gets every connection, of its kind (upstream.Kind), from the
//     server's upstream.Transport (Shared.Transport: upstream.Direct
//     unless a test or another way to the servers replaces it);
//   - a transaction's queue is package txn's; the session answers each
//     queued command and sends the unit at EXEC;
//   - its fair share of the shared connections is decided by package
//     limits' Share, the failed-AUTH delays by limits' AuthTable; the
//     session acts on them (share.go, authlimit.go);
//   - what a decision changes of the protocol state, and the CLIENT REPLY
//     mode, are rewrite's (rewrite.State.Apply, rewrite.ReplyMode);
//   - subscribe mode is package pubsub's (a pubsub.Mode: its round, the
//     RESP3 bridge's legs and barriers, the connections and relays), to
//     which a session is a pubsub.Session: the session keeps the loop that
//     serves it, the framing of the client's input for it and the plan of a
//     bridged RESP3 client's command (bridge.go);
//   - RESP2 client-side caching's state, REDIRECT translation and answers
//     are package tracking's (a Tracker, given the values it needs); the
//     connections a CLIENT TRACKING opens and closes are the session's
//     (tracking.go);
//   - CLIENT LIST, KILL and UNBLOCK of the proxy's own clients are package
//     clients' answers, across the sessions: a Session is a
//     clients.Client, and publishes what CLIENT LIST shows of it
//     (clients.View) at the end of each batch.
//
// A session knows its server only as Shared: the bounds it serves under
// (Config), the values every session shares (the routes, the policy, the
// command tables, the capture, the metrics, the memory budget), the
// control loop (Control) and the other sessions (Registry, a
// clients.Registry of Sessions). Package proxy fills it and runs one
// Session per accepted connection.
package session
