// Package jobmix is the load generator of the job benchmark: clients that
// loop enqueue, claim, complete on a queue of their own, for a fixed time
// after a warmup, and report throughput and latency.
//
// Two modes drive the same mix:
//
//   - legacy: the stand's wire-4 client (stand/legacy), exactly as a
//     production wire-4 connector talks: EVALSHA of the pinned scripts, and
//     for every claim the pause read (EXISTS) in a round trip of its own.
//     Pointed at a scripts node it measures Lua; pointed at the proxy in
//     front of a module node it measures the migration path.
//   - native: EMQ.ENQUEUE, EMQ.CLAIM and EMQ.COMPLETE sent directly with
//     valkey-go to a module node, the way a wire-6 connector does (the
//     module reads the pause flag itself, so there is no separate read).
//     It is the limit the proxy path is measured against.
//
// Each client owns one connection and one queue (bench{<run>c<i>}), so
// claims never contend and every claim finds the job its client enqueued;
// a shared queue would measure lock-step contention on one hash slot's
// keys instead of the data path. At pipeline 1 a cycle is three calls, each
// waited for; at pipeline P it is three round trips of P calls each (P
// enqueues, P claims, P completes; the legacy client's pause read adds one
// round trip before the claims). An op is one script call (one EMQ.*
// command); pause reads are not counted as ops.
//
// Latency is measured per call at pipeline 1 (a legacy claim includes its
// pause read) and per round trip of P calls otherwise.
//
// The package must not talk to anything but the address it is given, must
// bound every run by time and count, and never touches keys outside its
// own queues.
package jobmix
