// Package deadline sets the data path's connection deadlines lazily.
//
// Setting a deadline costs a timer update in the runtime (a lock and a
// heap operation), and the data path would set two or three per batch:
// the client write, the upstream write, the upstream read after each
// reply. Instead a deadline is pushed on only when less than
// deadlineSlack of its timeout is left, so a write or a wait that starts
// at any moment still gets at least (1 - 1/8) of its timeout and at most
// all of it.
//
// Each Refresh reads the clock. Sharing one read between a write's
// deadline, its timing and the batch's latency (three reads fewer per
// pipeline-1 call) was measured and left out: on a kvm-clock virtual
// machine the read that follows a system call carries the cost and the
// ones after it are nearly free, so the remaining reads took the time the
// removed ones had (time.Now at 1.8-2.0% of the proxy's CPU before, 1.6-1.9%
// after, in 20-second profiles of 50 clients' GETs).
package deadline

import "time"

// deadlineSlack is the part of a timeout a lazily set deadline may have
// used up before it is pushed on.
const deadlineSlack = 8

// Refresh sets a deadline timeout from now with set, unless cur
// (the deadline set last, zero for none) still leaves at least
// timeout - timeout/deadlineSlack; it returns the deadline now in force.
func Refresh(set func(time.Time) error, cur time.Time, timeout time.Duration) time.Time {
	now := time.Now()
	if !cur.IsZero() && cur.Sub(now) >= timeout-timeout/deadlineSlack {
		return cur
	}
	next := now.Add(timeout)
	_ = set(next)
	return next
}
