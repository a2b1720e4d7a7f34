package proxy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/control/table"
)

// Tables only move forward. Every write of a node's control table raises
// its epoch, and every entry written on a node is newer than the entry it
// replaces (the mover's writes are fenced: package control, fence.go). A
// table read from a node that is older than one already read from it (a
// lower epoch, or an entry older than the one seen, or another one at the
// same epoch) is therefore a node that lost writes: restarted without an
// fsync'd AOF, or failed over to a replica that had not received them
// (ack_replicas 0). Believed again, it would route a queue by a hold or a
// flip that was undone, to a node whose copy is stale. Such a table is not
// adopted: the proxy keeps routing by the newer table it has from that
// node, logs an alarm once per episode and counts every such read in
// emqproxy_control_tables_backwards_total. The lease renewal that read it
// still counts (the node answers); the registration keeps the epoch the
// proxy applied, and a mover writes above every epoch a proxy registered
// on a node applied (control.Mover.maxEpoch), so the node's next table
// is newer again and adopted. An entry removed from a table by hand is
// not taken for a lost write.

// forwardTables is the state of that check.
type forwardTables struct {
	backwards *prometheus.CounterVec
	reported  map[*ctlNode]string // the regression logged last, per node ("" none)
}

// initForward prepares the check and registers its metric on reg (nil: none).
func (c *controller) initForward(reg prometheus.Registerer) error {
	c.fwd.backwards = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "emqproxy_control_tables_backwards_total",
		Help: "Control tables read from an upstream that were older than one already read from it (a lower epoch, or an older entry), not applied."},
		[]string{"upstream"})
	c.fwd.reported = map[*ctlNode]string{}
	if reg != nil {
		if err := reg.Register(c.fwd.backwards); err != nil {
			return fmt.Errorf("%w: metrics: %w", ErrOptions, err)
		}
	}
	return nil
}

// adopt makes t, just read from n, n's table, unless it is older than the
// table n has (backwards): then it is an alarm and n keeps its table.
func (c *controller) adopt(n *ctlNode, t table.Table) {
	if n.have {
		if why := backwards(n.table, t); why != "" {
			c.fwd.backwards.WithLabelValues(n.up.Name()).Inc()
			if c.fwd.reported[n] != why {
				c.fwd.reported[n] = why
				c.log.Error("control table of an upstream went backwards (it lost writes?): not applied, the newer table read before stays",
					zap.String("upstream", n.up.Name()), zap.Int64("epoch_read", t.Epoch), zap.Int64("epoch_kept", n.table.Epoch), zap.String("why", why))
			}
			return
		}
	}
	if c.fwd.reported[n] != "" {
		c.log.Info("control table of an upstream moves forward again", zap.String("upstream", n.up.Name()), zap.Int64("epoch", t.Epoch))
		delete(c.fwd.reported, n)
	}
	n.table, n.have = t, true
}

// backwards says why t is older than prev, both read from one node ("":
// it is not).
func backwards(prev, t table.Table) string {
	if t.Epoch < prev.Epoch {
		return fmt.Sprintf("epoch %d after epoch %d", t.Epoch, prev.Epoch)
	}
	for _, q := range slices.Sorted(maps.Keys(prev.Queues)) {
		old := prev.Queues[q]
		e, ok := t.Queues[q]
		switch {
		case !ok:
		case e.Epoch < old.Epoch:
			return fmt.Sprintf("entry of %s %q after %q", q, e.String(), old.String())
		case e.Epoch == old.Epoch && e != old:
			return fmt.Sprintf("entry of %s %q after %q, at the same epoch", q, e.String(), old.String())
		}
	}
	return ""
}
