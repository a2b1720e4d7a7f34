// Package deadline sets the data path's connection deadlines lazily.
//
// Setting a deadline costs a timer update in the runtime (a lock and a
// heap operation), and the data path would set two or three per batch:
// the client write, the upstream write, the upstream read after each
// reply. Instead Refresh pushes a deadline on only once more than
// 1/deadlineSlack (1/8) of its timeout has passed since it was set, so a
// write or a wait that starts at any moment still gets at least (1 - 1/8)
// of its timeout and at most all of it.
//
// Each Refresh reads the clock. Sharing one read between a write's
// deadline, its timing and the batch's latency (three reads fewer per
// pipeline-1 call) was measured and left out: on a kvm-clock virtual
// machine the read that follows a system call carries the cost and the
// ones after it are nearly free, so the remaining reads took the time the
// removed ones had (time.Now at 1.8-2.0% of the proxy's CPU before, 1.6-1.9%
// after, in 20-second profiles of 50 clients' GETs).
package deadline
