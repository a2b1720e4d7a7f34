// Package e2e proves the operator's promise end to end: an unchanged wire-4
// client pointed at the proxy in front of a module node sees the same
// replies, and leaves the same keys, as the same client talking directly to
// a scripts node (verification.md, section 2).
//
// Every scenario runs twice on fresh nodes: once with the stand's legacy
// client (package stand/legacy) directly against a scripts node, and once
// with the same client through a proxy (package proxy, with the pinned map
// of the stand) in front of a module node. A Transcript records every reply
// the client saw, step by step, with the server-time window of each step;
// Compare then holds the two runs to each other: the replies (time replies
// masked to their window), and every key under each queue's hashtag (lease,
// run-at and completion scores masked to the windows of the steps that can
// have written them, lease_epoch checked against the module node's run_id
// on every row the client leased and then masked). Any difference is
// printed key by key.
//
// The tests run every scenario on each server of the stand's table
// (node.EachServer: Debian's redis-server, and Valkey when the machine has
// one), both paths on the same server, as subtests named by the server.
//
// The package owns the two paths (StartScripts, StartProxied), the
// transcript, the snapshot of a queue's keys and the comparison. It must
// not change the proxy, the rewrite rules or the stand: a difference it
// finds is a bug in one of them or a declared delta, and is reported, not
// patched here. It starts every server it talks to and never connects to
// one it did not start.
package e2e
