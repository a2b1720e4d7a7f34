package upstream

import (
	"errors"
	"time"

	"go.uber.org/zap"
)

// The readiness probe.
//
// The fence runs when a connection is opened, so a brand changed on a live
// node (someone runs SET {emq}:version, a node is replaced behind the same
// address without the connection breaking) would otherwise go unnoticed for
// as long as the shared connections live. The probe re-runs the OnConnect
// fence every Options.ProbeInterval on a short-lived connection of
// its own (dialed, booted and fenced exactly like a dedicated connection,
// then closed). When the fence refuses it, the upstream is marked not
// fenced (Readiness reports it, /readyz answers 503) once its shared
// connections are closed, and every connection it handed out to one
// client (owned.go): every command waiting on them gets the explicit
// lost error, new ones fail fast with the fence error, and the normal
// reconnect loop, which re-runs the fence on every connect, restores service
// once the node is fit again.
//
// A probe that fails for another reason (the node does not answer within
// the dial timeout, for example while it serves a huge batch; the
// connection breaks; AUTH fails) is no verdict on the brand: it is logged
// and counted (upstream_errors_total{kind="probe"}) but closes nothing;
// liveness of the shared connections is their own reply timeout's job.

// DefaultProbeInterval is the probe period used when
// Options.ProbeInterval is 0.
const DefaultProbeInterval = time.Second

// probe runs the periodic fence check until the upstream closes.
func (u *Upstream) probe(every time.Duration) {
	u.every(every, func() {
		if u.Up() { // else the reconnect loop fences every new connection itself
			u.probeOnce()
		}
	})
}

// probeOnce dials, boots and fences one connection, closes it, and acts on
// the outcome.
func (u *Upstream) probeOnce() {
	dl, fenceErr, err := u.dialer.dial(u.ctx, 2)
	if err == nil {
		_ = dl.Conn.Close()
		u.probes.Add(1)
		return
	}
	if u.ctx.Err() != nil {
		return
	}
	if !fenceErr || errors.Is(err, ErrLost) {
		// Not a verdict: the node did not answer the fence in time (busy,
		// frozen) or the connection broke. The shared connections' own
		// reply timeout judges liveness.
		u.met.UpstreamError(u.name, "probe")
		u.log.Warn("upstream probe failed", zap.Error(err))
		return
	}
	u.met.UpstreamError(u.name, "fence")
	u.log.Error("upstream fence no longer holds; closing its connections", zap.Error(err))
	// The connections are closed before the verdict is recorded: whoever
	// reads the verdict (Readiness, /readyz) and then sends finds no
	// connection to the node left, only the unavailable error. Recorded
	// first, a command sent in between went to the node the verdict
	// refuses. The clients' own connections go first: a shared one closed
	// is redialed (keep), and that dial's fence records the same verdict.
	u.owned.closeAll() // owned.go: pins, blocking and subscribed connections
	for _, s := range u.allSlots() {
		if p := s.cur.Load(); p != nil {
			p.Close()
		}
	}
	u.setState(err, false)
}

// Probes returns how many probes passed the fence so far.
func (u *Upstream) Probes() int64 { return u.probes.Load() }
