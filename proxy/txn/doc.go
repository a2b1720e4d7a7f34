// Package txn is a client's transaction as the proxy queues it: MULTI and
// the queued commands (decided, rewritten where decided), kept encoded and
// sent at EXEC as one unit, MULTI ... EXEC, in one batch on one upstream
// connection; the bounds on it (commands, bytes, and what it holds of the
// memory budget); what the queued commands tell of its route (the plan's
// TxRoute); whether any of them is a write, for the replicas'
// confirmation; and the SCRIPT LOADs it queued, which go to every other
// upstream once EXEC ran them.
//
// The session (package session) owns a Tx: it answers each queued command
// with the reply Queue gives, keeps the reply slots Slots names, and sends
// Buf at EXEC, on the normal path's segment or on the RESP3 bridge's leg
// alike. A command the server refuses at queue time (unknown, wrong arity,
// no-multi) is never queued: the plan answers the server's error from its
// command table and EXEC answers EXECABORT (package plan's queuecheck.go).
// What that table cannot tell (the upstream user's ACL, say) gets +QUEUED,
// and EXEC the server's own answer.
package txn
