// Package verify is the differential harness: it holds the native job-core
// verbs of a module node to the wire-4 scripts they replace.
//
// Run takes one scratch server (module loaded, branded echomq:6.0.0), the
// pinned map and the folder of script bodies. It refuses to measure unless
// every body hashes to its pin. Each differential case runs twice, on two
// fresh queues of the same server: once as the wire-4 operation exactly as
// the connector performs it (host steps such as CLAIM's pause read, then
// EVAL of the body) and once as EMQ.<TOKEN> with the same tail. The typed
// RESP2 replies and every key under each queue's hashtag are compared, with
// the queue name taken out of the key names, time scores held to the window
// of server time around their own call and then masked, and the declared
// deltas (lease_epoch, CLAIM on a paused queue) checked against their
// declarations. Layout errors, the brand fence and the native-only verbs
// RESCHEDULE and REQUEUE are checked against the contract alone. After the
// cases it checks that no EMQ.* record reached the AOF and, when the caller
// can restart the server, that the state after a restart equals the state
// before.
//
// Server capabilities are detected from INFO server: a server has a cached
// module clock when it reports valkey_version (any Valkey) or a
// redis_version of 7.2 or later. Only then can the lease-exact cases (script,
// command and TIME in one MULTI/EXEC) demand equal scores; on older servers
// they are held to the window rule and reported as skipped with the reason.
// The lease-exact cases cover every verb that reads the clock for a score
// or a due check (CLAIM, EXTEND, COMPLETE, FAIL with backoff and dead,
// REAP, PROMOTE); two of them also set a score equal to now inside the same
// transaction, the boundary REAP (deadline < now) and PROMOTE (run-at <=
// now) turn on, which only a cached clock can make exact, so they do not
// run without one. The report's second line names the mode the run used.
//
// Replay (replay.go) is the second tool: it runs a capture of production
// traffic (package capture) on a scripts node and a module node and holds
// them to each other with the same comparison; its doc comment gives its
// decisions.
//
// The package owns the case tables, the comparison and the report. It must
// not be pointed at a production node: it writes queues named v<tag>A<n> and
// v<tag>B<n>, temporarily removes and rewrites the brand key for the fence
// checks, and refuses a non-empty keyspace unless Config.Force is set. It
// never deletes a key it did not write and never restarts a server itself.
package verify
