// Package tracking is RESP2 client-side caching: CLIENT TRACKING ...
// REDIRECT <id>.
//
// Over RESP2 a tracking client's invalidations go to another connection,
// the one its REDIRECT names, subscribed to __redis__:invalidate. The id a
// client knows is a session of the proxy's (CLIENT ID), which no server
// knows, and tracking lives on a connection: the keys a connection read
// are the ones invalidated. So the proxy bridges it:
//
//   - A RESP2 client's CLIENT TRACKING (rewrite's Tracking effect) moves
//     the client to connections of its own, one per upstream it uses (the
//     isolated client's connections, package session's share.go, kept
//     while it tracks), and is sent on its connection to the default
//     route's upstream, its REDIRECT id translated (below); the client
//     gets the server's reply. Once tracking is on, every connection of
//     the client's own tracks as it asked: those already open get the
//     same command, those opened later (another route, a WATCH pin, a
//     blocking command's connection) get it before their first command,
//     their replies dropped. With BCAST the client's connection to every
//     upstream opens at once, so every node announces the prefixes'
//     changes.
//   - REDIRECT <id> of a live session: on each upstream the proxy opens a
//     connection of its own for the tracking client (upstream/owned.go),
//     asks its id (CLIENT ID) and subscribes it to __redis__:invalidate;
//     the tracking command names that id. A goroutine relays each
//     invalidation message it gets to the session the client named, on
//     the way its own messages go to it (package pubsub's RedirConn,
//     through the target's Subscriber's writer): as the server sends
//     them to a redirect target, a RESP2 client in subscribe mode gets the
//     message, a bridged RESP3 client the invalidate push, any other
//     nothing.
//   - REDIRECT <id> of no session: the id is translated to one no
//     connection of the server has, so the server answers its own error
//     ("The client ID you want redirect to does not exist") in its own
//     order of checks. When the named session ends, the proxy closes the
//     connections that relayed to it: the server finds the redirect
//     broken, as it would (a RESP2 client gets nothing; CLIENT
//     TRACKINGINFO shows broken_redirect).
//   - CLIENT TRACKING OFF, RESET, and the end of the session close the
//     client's tracking connections and the relays; the client is back on
//     the shared connections.
//   - CLIENT GETREDIR is answered from the session (the id the client
//     named); CLIENT TRACKINGINFO is the server's answer from the client's
//     connection to the default route's upstream, its redirect id the
//     session's.
//   - A tracking client's CLIENT CACHING applies to the next command of
//     the connection it is sent on; with several upstreams the client's
//     next command may go to another than the default route's, so the
//     session keeps it (Tracker.KeepCaching) and sends it on the
//     connection of the client's next command.
//
// A Tracker is one session's state: the CLIENT TRACKING in force, its
// relays, the WATCH connections it keeps, the upstreams its connections
// track on, a kept CLIENT CACHING. It does what needs only that state and
// the values it is given: the server's relay registry, the tracking
// client as its relays know it, and whether a session is listed (Env), and
// the connections the session hands it. What touches the session's round
// stays package session's, which calls the Tracker: opening and closing
// the client's own connections (its share, its WATCH pin, its connection
// for blocking commands), closing the client when a connection that
// tracked breaks, and adding a kept CLIENT CACHING to the round's segment.
// Whether a session is listed is a function (Env.Listed): the sessions are
// the server's registry's, above this package, and change while the
// Tracker lives.
//
// The package imports upstream, pubsub and rewrite, never package session.
package tracking
