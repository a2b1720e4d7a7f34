package upstream

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

// AckProbing reports whether a write batch is out on the probe connection
// while the replicas are short (ack.go).
func (u *Upstream) AckProbing() bool { return u.ack != nil && u.ack.probing.Load() }

// ProbeConnected reports whether the connection that carries write batches
// while the replicas are short is up (ack.go).
func (u *Upstream) ProbeConnected() bool { return u.ack != nil && u.probePipe() != nil }

// ReadsConnected reports whether the connection that carries reads while
// a WAIT is in flight is up (ack.go).
func (u *Upstream) ReadsConnected() bool { return u.ack != nil && u.readsPipe() != nil }
