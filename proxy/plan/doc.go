// Package plan decides what the proxy does with one client command, and
// only decides: Decide is a function of what it is given, with no network
// I/O, no sleep and no waiting.
//
// Every command a session reads, in every mode (normal service, a WATCH
// pin, a blocking command, a transaction queued and sent at EXEC, a
// pipeline split across routes, a bridged RESP3 client), is decided by
// Decide and nowhere else. Its input (Input) is the command's arguments,
// the session's protocol state (rewrite.State, which rewrite.Decide
// updates), the View of the round (the policy, the Router, the control
// state and the control loop, the servers' command tables; the fences are
// in the protocol state), the session's Binding (the upstream of a WATCH
// pin or of a bridged client's WATCH leg, the transaction's TxRoute), and
// the keys the server gave when a step asked for them. In order:
//
//  1. rewrite.Decide, under the view's policy; a bridged client's HELLO 2
//     is refused while it may be pushed to (Step.Pushes);
//  2. a wrong password is counted against the connection and its address
//     (the Auth it is given; the delay it earns is the caller's to wait:
//     Step.AuthWait);
//  3. before authentication, the server's unknown-command and arity errors,
//     which the server answers before it asks for a password (queuecheck.go);
//  4. inside MULTI, the server's queue-time errors (queuecheck.go);
//  5. the shared-connection rule (rule.go: Rule);
//  6. the command's keys and their queues, found once (Step.CmdKeys and
//     Step.Queues, borrowing the session's Bufs; a script call's are
//     rewrite.Decide's, read by rewrite.ParseScriptCall), and from them its route (route.go): CROSSROUTE refusals, the
//     binding of a WATCH pin, a transaction or a bridged connection, the
//     scripts role (a verb rewrite becomes a pass on a scripts upstream);
//     at EXEC the route is recomputed from the queues of what was queued,
//     under the routes of now;
//  7. with the control table on, admission by the same keys' queues
//     (admit.go): an admitted command counts in flight in the state it was
//     admitted under, in total and per slot of its queues (Step.Admitted
//     and Step.Slots, released by the caller).
//
// What only the network or time can tell is the caller's, and comes in as
// an input of the next step:
//
//   - Step.NeedKeys: the command's keys need COMMAND GETKEYS (there are
//     routes to choose from and the server's key specs leave them open);
//     the caller asks and decides again with Step.Keys and Step.Asked;
//   - Step.Wait: a queue of the command is held, or routed to a node whose
//     lease lapsed; the caller sends what it built, waits for a new
//     control state (ControlState.Changed) and decides again, and past its
//     hold decides it once more with Step.WaitedOut, which refuses it
//     (TRYAGAIN) if its queue still may not be sent;
//   - Step.Stale: the control state changed while the command was being
//     admitted; the caller loads the new state and the routes stored before
//     it and decides again.
//
// Its two side effects are through values it is given: Auth counts a
// failed authentication, and an admitted command is counted in the
// ControlState of the view, Control saying whether that state is still in
// force. Auth is called only for a wrong password, Control only for a
// command whose keys name a queue while the control table is on: a command
// in normal service makes no call through an interface.
//
// It must not: send or read anything, sleep or wait, keep anything of a
// command past Decide but in the session's Bufs and the Step, decode a
// reply, or import package proxy (it imports rewrite, proxy/cmdtable,
// proxy/upstream for the upstreams it routes to, and resp).
// Everything after it (the reply's bytes of a local answer, forwarding,
// the transaction's queue) leaves its decision as it is.
package plan
