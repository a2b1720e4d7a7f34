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
