package upstream

import "time"

// What an upstream shows of its connections beyond Fenced and LastError:
// read by the proxy's tests, which watch the data path from outside this
// package, and cheap enough for an admin page.

// WatchInterval is how often an upstream checks its idle shared
// connections (the read deadline of a connection with nothing in flight
// is not an error: watch).
const WatchInterval = watchInterval

// Owned returns how many connections of one client each (a WATCH pin, a
// blocking command's, a subscriber's) the upstream has handed out and not
// got back (owned.go).
func (u *Upstream) Owned() int { return u.owned.len() }

// InFlight returns how many batches sent on p still wait for replies.
func (p *Pipe) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight) - p.head
}

// ReadDeadline returns the read deadline last armed on p; zero for none.
func (p *Pipe) ReadDeadline() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rdl
}

// AckProbing reports whether a write batch is out on the probe connection
// while the replicas are short (ack.go).
func (u *Upstream) AckProbing() bool { return u.ack != nil && u.ack.probing.Load() }

// ProbeConnected reports whether the connection that carries write batches
// while the replicas are short is up (ack.go).
func (u *Upstream) ProbeConnected() bool { return u.ack != nil && u.probePipe() != nil }

// SetMaxCombinedWrites changes how many writes a session makes in a shared
// connection's writer role before it hands the role to the connection's
// own writer (4), for tests that make the hand-over happen all the time;
// it returns the value it replaced. Call it before any upstream exists.
func SetMaxCombinedWrites(n int) (was int) {
	was, maxCombinedWrites = maxCombinedWrites, n
	return was
}
