// Package proxy is the data path of emqproxy: it accepts client
// connections, frames their commands under the server's protocol limits,
// plans each command once (rewrite.Decide and what only the servers'
// tables and the proxy's routes can tell), forwards what is forwarded on
// its own pipelined upstream connections, and writes every reply back to
// the client byte for byte as the server sent it, in command order.
//
// # The way of one command
//
// The data path is sixteen packages, each with its job in its doc
// comment:
//
//   - proxy (this one): the Server, its Options, the routes, the control
//     loop of moved queues, the capture controls;
//   - proxy/session: one client's session: its loop, the one path of a
//     command (and its two carriers: the round's segment, the RESP3
//     bridge's legs), what goes in a segment and when it is sent, its
//     transaction's EXEC, local answers;
//   - proxy/segment: the commands sent before any reply is awaited (one
//     batch per connection) and their replies put back in command order;
//   - proxy/txn: a transaction as the proxy queues it (its bounds, its
//     budget, its route, its writes and SCRIPT LOADs);
//   - proxy/conn: one client connection's bytes both ways (the read
//     buffer under the memory budget, its framing, blocking and watched
//     reads, the output and its write under the write deadline);
//   - proxy/clients: the registry of the sessions, what CLIENT LIST shows
//     of each, and the CLIENT LIST, KILL and UNBLOCK answers across them;
//   - proxy/tracking: RESP2 client-side caching (a tracking client's
//     state, its REDIRECT translated to a relay, its kept connections);
//   - proxy/pubsub: subscribe mode (a Mode: its round, the legs and
//     barriers of the RESP3 bridge) and the connections that carry pushes
//     (the Subscriber's relay and writer, tracking's redirect relays);
//   - proxy/plan: what to do with one command, a function of what it is
//     given, with no I/O;
//   - proxy/upstream: the connections to one upstream node (dialing and
//     the fence on connect, the connections of one client each, Sentinel
//     failover, the replicas' confirmation of writes);
//   - proxy/pipe: one pipelined connection and the batches it carries;
//   - proxy/observe: the metrics, the audit log and the capture;
//   - proxy/limits: the memory budget, the failed-AUTH table and a
//     client's fair share of the shared connections;
//   - proxy/cmdtable: the servers' command tables;
//   - proxy/deadline: lazily set connection deadlines;
//   - proxy/clienterr: the errors the proxy itself tells a client (a
//     refusal, an upstream's failure, a limit of its own) and Reply, the
//     one function that words them as RESP error replies.
//
// Below them all is package resp, the module's one reader and writer of
// RESP (the client input framer, the reply reader, the writers), which
// imports nothing of the module; it is not under proxy/ because the
// capture, the rewrite, the fence, the queue mover and the test stand use
// it too.
//
// Each imports only packages below it in that list, never one above (a
// cycle cannot compile, and TestLayers keeps the order): proxy imports
// session and those it fills session.Shared with; session imports every
// other but proxy and deadline; segment imports conn, observe, upstream,
// pipe and limits; txn imports plan, pipe, limits and resp; conn imports
// limits, resp and deadline;
// clients and tracking import pubsub, upstream and pipe (clients cmdtable
// too); pubsub imports upstream, pipe, observe, limits and resp; plan
// imports upstream, cmdtable and resp; upstream imports pipe, cmdtable and
// resp; pipe imports resp and deadline; observe imports cmdtable; cmdtable
// imports resp; limits, deadline and clienterr import none of them
// (proxy, session, plan, txn, upstream and pipe import clienterr to make
// the errors they tell a client). What a
// lower package needs of a higher one it is given as a value or asks
// through a small interface the higher one implements (plan.Control,
// plan.Auth, pubsub.Session, clients.Client). A command in normal service:
//
//	client socket
//	  │ proxy/session: Session.Serve (session.go): fill reads into the client's
//	  │ buffer (proxy/conn's Conn.Fill), round frames (Conn.Next) and decides
//	  │ what it holds, up to MaxPipeline
//	  ▼
//	resp.Framer.Next ─────────────── package resp: resp.Frame{Args, Raw}, sliced
//	  │                              from the buffer, checked against resp.Limits
//	  ▼
//	session.serveCommand (command.go) → admit → decide, plan (plan.go): the inputs
//	  │ (the round's plan.View, loaded once by loadView; the session's
//	  │ rewrite.State; its plan.Binding: a WATCH pin, a bridged WATCH leg,
//	  │ the transaction's plan.TxRoute; its plan.Bufs for the keys)
//	  ▼
//	plan.Decide ─────────────────── proxy/plan, no I/O: rewrite.Decide under
//	  │ the view's policy; a failed AUTH counted through plan.Auth (the
//	  │ session's AuthFailed, authlimit.go, over limits.AuthTable); the
//	  │ queue-time and arity errors and the shared-connection rule, both
//	  │ read from cmdtable.Store; the keys (cmdtable.Entry.Positions, or
//	  │ those the step was given); the route (plan.Router) and the control
//	  │ table's admission (plan.ControlState, asking plan.Control: the
//	  │ controller, control.go)
//	  │ → plan.Step: the rewrite.Decision and the *Upstream it goes to, or
//	  │   NeedKeys: decide asks COMMAND GETKEYS (upstream.Upstream's
//	  │   GetKeys) and plans again with the keys; Stale: plan loads the
//	  │   new control state and plans again; Wait: waitHeld (plan.go)
//	  │   waits for a new control state and plans again, past the hold
//	  │   with WaitedOut (the plan's TRYAGAIN); AuthWait: authDelay waits
//	  ▼
//	session.observe (observe.go): the metrics (observe.Metrics), then
//	  │ observe.Session.Command ──── proxy/observe: the audit record, kept
//	  │                              until the round's replies are written
//	  ▼
//	the carrier (command.go; in normal service segment.go's inSegment):
//	  │ queued in MULTI, EXEC, forwarded or answered by the proxy; then apply
//	  ▼
//	forward (forward.go) chooses its connection and adds it to the
//	  │ segment ─────────────────── proxy/segment: one pipe.Batch per
//	  │ upstream connection (pipe.Encode: the client's bytes, or a rewritten
//	  │ head over the client's tail), on a shared pipe.Pipe of an
//	  │ upstream.Upstream or the client's own, and the command's reply
//	  │ slot; inside MULTI it is queued instead (proxy/txn's Tx.Queue;
//	  │ transaction.go sends the unit at EXEC); with
//	  │ ack_replicas the segment readies each batch's WAIT (AckBatch); the
//	  │ SCRIPT LOAD fan-out goes along (scriptload.go's alsoLoad); a
//	  │ capture that wants its queue copies it (observe.go's
//	  │ captureCommand → observe.Session.Forwarded)
//	  ▼
//	pipe.Pipe ───────────────────── proxy/pipe: batches of many clients
//	  │ written together; its reader frames each reply with resp.Reader.Read
//	  │ (package resp), its bytes charged through the batch's resp.Account to
//	  │ the memory budget (limits.Budget; budget.go)
//	  ▼
//	session flush (segment.go): the capture records get their replies
//	  │ (observe.go's captureReplies → observe.Session.Finish, Publish);
//	  │ segment.Segment.Emit notes each audited reply's kind
//	  │ (observe.Session.Reply) and moves the replies, local ones
//	  │ included, to the output in command order
//	  ▼
//	session.write → conn.Conn.Write: to the client, under the write
//	  │ deadline (proxy/deadline)
//	  ▼
//	the round's audit records, written (observe.go's logAudits →
//	observe.Session.WriteAudits)
//
// (The files named in this drawing are package session's unless it names
// another package.) A client in subscribe mode, or a subscribed or
// tracking RESP3 client, is served by the same loop in subscribe mode's
// rounds (a pubsub.Mode, through the session as a pubsub.Session:
// subscribe.go), which frame with the same resp.Framer: the subscribe
// family, PING, QUIT and RESET go to its subscribed connection (a
// pubsub.Subscriber, whose relay and writer goroutines carry the server's
// replies and pushes to the client) as they are; a bridged RESP3 client's
// other commands take the same path (command.go's serveCommand) on the
// bridge's carrier (bridge.go's onBridge), sent on the Mode's legs
// (package pubsub's legs.go), the relay handing the
// server's reply to a capture record (observe.Captured, in a pubsub.Tap);
// any other command of a RESP2 subscriber is the server's to refuse while
// the client is subscribed, or, once nothing is subscribed, goes back to
// normal service.
//
// # What it owns
//
// This package: the server lifecycle (server.go: New, Serve, Shutdown,
// the accept loop, the session.Shared every session is given), its
// Options (options.go, every default of the data path), the routes by
// queue across named upstreams with their roles (route.go: SwapRoutes,
// CheckRoutes, Routes, RouteFor, over package plan's Router; QueueRoute,
// the same rule for a configuration's routes alone), the control
// loop of moved queues (control.go, which builds the plan.ControlState
// values the plan reads and implements session.Control for a session's
// waits and leases), the runtime's soft memory limit (memlimit.go), the
// budget's metrics (budget.go) and the capture controls (StartCapture,
// StopCapture: capture.go, over package observe's Capture).
//
// Package session, besides the loop above: the SCRIPT LOAD fan-out
// (scriptload.go); the writes of a batch for the replicas' confirmation
// (acks.go: plan.Step.IsWrite says which, the confirmation itself is
// upstream's); what it does with its share of the shared
// connections (share.go: package limits' Share decides); the replies it
// makes from what only it knows: CLIENT LIST, INFO, KILL and UNBLOCK
// (clients.go: the session publishes its clients.View, package clients
// answers across the Registry), a client's CLIENT REPLY mode (a
// rewrite.ReplyMode), a RESP2 client's CLIENT TRACKING (tracking.go: the
// connections it opens and closes, over package tracking's Tracker); what
// a session does under the memory budget (budget.go) and the limits on
// failed authentications and on the time to authenticate (authlimit.go),
// the limits themselves being package limits'; the RESP3 bridge's carrier
// of a command (bridge.go), which package pubsub's Mode asks for through
// pubsub.Session.

// What to do with a command is rewrite's to say: the plan (package plan)
// only amends that decision with what rewrite/, being pure, cannot know (the servers'
// command tables, the routes, the control table, the fences). The package
// must never decode and re-encode a reply (the patches of SCRIPT EXISTS
// and the HELLO id excepted, from the server's own bytes), must never
// resend a command that may have reached an upstream (a command that fails
// in flight gets an explicit error), and must not log payloads, values or
// secrets. Configuration parsing and the fence checks live elsewhere: they
// reach the proxy through Options and the OnConnect hook.
//
// # One session state
//
// Package session is about 2,900 lines; its session struct holds
// twenty-one fields, each owned by one file or package: the round's state
// (roundState: its segment, a package segment Segment, and what the round
// notes), the client's own connections (ownConns), its authentication
// clock (authState), its transaction (tx, a package txn Tx), its CLIENT
// REPLY mode (rm, a rewrite.ReplyMode), its share (sh), its admissions
// (adm), and c (package conn's Conn), obs (package observe's Session), v
// (package plan's View), sub (package pubsub's Mode), listing (package
// clients' View), trk (package tracking's Tracker); and the command being
// served (cmd, command.go) with its two carriers (inSeg, bridge). A
// command value holds its frame, its plan.Step and where its reply goes;
// it is the session's for one command only, cleared once it is served
// (kept in a field so that passing it to a carrier does not move it to
// the heap). What a decision the proxy answers (or forwards outside
// MULTI) changes of the protocol state is rewrite's (rewrite.State.Apply,
// from the session's apply; EXEC and DISCARD end a transaction through
// rewrite.State.EndMulti, from command.go's endMulti). The session still
// sets some of the state itself: MultiAborted by the transaction's refusals
// (txQueue), Wire6 for an EMQ.VERSION queued in a transaction
// (command.go's carry), Watching by a WATCH pin (forward.go), Tracking
// (tracking.go), Subscribed on the bridge (bridge.go; cleared when
// subscribe mode ends, subscribe.go), and the round's Fenced, NoSub and
// SetInfo (plan.go).
//
// Every command a session serves, in normal service or on the RESP3
// bridge, takes one path (command.go's serveCommand): admit (the plan,
// the wait of a held queue, the authentication delay, the reply only the
// proxy can complete, the audit record and the reply's fate), then the
// transaction's queue, its EXEC, the forward or the proxy's answer, then
// apply. What differs is only how a command travels, which its carrier
// says: the round's segment in normal service (segment.go's inSegment,
// one batch per connection, the replies written in command order), the
// legs and barriers of the bridge (bridge.go's onBridge, the replies
// relayed by goroutines in the server's order). A change to how a command
// is handled is made once, in command.go or in the plan; a change to how
// it travels, in its carrier.
package proxy
