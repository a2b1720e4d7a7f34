package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/emqproxy/emqproxy/stand/node"
)

// backwardsCount reads emqproxy_control_tables_backwards_total of upstream up.
func backwardsCount(t *testing.T, reg *prometheus.Registry, up string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "emqproxy_control_tables_backwards_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "upstream" && l.GetValue() == up {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestTableGoingBackwardsIsNotApplied: billing was moved to module-a
// (scripts-b's table at epoch 5). scripts-b then loses its last writes (as
// a restart without an fsync'd AOF would): its epoch and billing's entry go
// back to epoch 4, where billing was still scripts-b's. The proxy does not
// believe it: billing stays on module-a, the alarm is logged once and
// counted at every read. A table whose epoch is newer but whose entry of
// billing is older than the one seen is refused too. A table newer in
// every respect is applied again.
func TestTableGoingBackwardsIsNotApplied(t *testing.T) {
	pol := testPolicy(t)
	mn := node.StartT(t, node.Options{Role: node.Module})
	scr := node.StartT(t, node.Options{Role: node.Scripts, Brand: pol.Map.LegacyBrand})
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	opts := Options{
		Policy:    pol,
		Registry:  reg,
		Upstreams: billingUpstreams(pol, mn, scr),
		Routes:    billingRoutes,
		Control:   &ControlOptions{Poll: 50 * time.Millisecond, Lease: 400 * time.Millisecond, Hold: 600 * time.Millisecond, ID: "p1"},
	}
	srvP, addr := serveProxy(t, opts, zap.New(core), nil)
	r := &routed{harness: &harness{t: t, node: mn, srv: srvP, addr: addr}, module: mn, scripts: scr}
	r.waitReady()
	c := r.dial()
	on := func(n *node.Node, key string) bool { return nodeDo(t, n, "EXISTS", key) == ":1\r\n" }

	// billing moved to module-a at epoch 5.
	writeTable(t, scr, "5", "billing", "5 owned module-a")
	r.waitApplied(t, scr, 5)
	c.do("SET", "emq:{billing}:a", "1").is("+OK\r\n")
	if !on(mn, "emq:{billing}:a") {
		t.Fatalf("billing is not routed to module-a at epoch 5")
	}

	// scripts-b lost its last writes: epoch 4, billing its own again.
	writeTable(t, scr, "4", "billing", "4 owned scripts-b")
	first := renewedAt(t, scr)
	poll(t, "several renewals", func() bool { return renewedAt(t, scr) > first+300 })
	c.do("SET", "emq:{billing}:b", "1").is("+OK\r\n")
	if !on(mn, "emq:{billing}:b") || on(scr, "emq:{billing}:b") {
		t.Errorf("the older table of scripts-b was applied: billing went to scripts-b")
	}
	if v := backwardsCount(t, reg, "scripts-b"); v < 3 {
		t.Errorf("emqproxy_control_tables_backwards_total{upstream=scripts-b} = %v after several reads, want one per read", v)
	}
	if got := nodeDo(t, scr, "HGET", "{emqproxy}:proxies", "p1"); !strings.Contains(got, `"applied":5,`) {
		t.Errorf("the registration on scripts-b no longer says epoch 5: %q", got)
	}
	alarms := logs.FilterMessageSnippet("went backwards").All()
	if len(alarms) != 1 || !strings.Contains(alarms[0].ContextMap()["why"].(string), "epoch 4 after epoch 5") {
		t.Errorf("alarms: %v, want one, epoch 4 after epoch 5", alarms)
	}

	// A newer epoch, but billing's entry older than the one seen.
	nodeDo(t, scr, "SET", "{emqproxy}:epoch", "6")
	poll(t, "the contradiction's alarm", func() bool { return len(logs.FilterMessageSnippet("went backwards").All()) == 2 })
	c.do("SET", "emq:{billing}:c", "1").is("+OK\r\n")
	if !on(mn, "emq:{billing}:c") {
		t.Errorf("a table contradicting billing's newer entry was applied")
	}
	if why := logs.FilterMessageSnippet("went backwards").All()[1].ContextMap()["why"].(string); !strings.Contains(why, `entry of billing "4 owned scripts-b" after "5 owned module-a"`) {
		t.Errorf("second alarm: %q", why)
	}

	// Newer in every respect: applied.
	writeTable(t, scr, "7", "billing", "7 owned scripts-b")
	r.waitApplied(t, scr, 7)
	c.do("SET", "emq:{billing}:d", "1").is("+OK\r\n")
	if !on(scr, "emq:{billing}:d") {
		t.Errorf("the newer table of scripts-b was not applied")
	}
	if n := len(logs.FilterMessageSnippet("moves forward again").All()); n != 1 {
		t.Errorf("%d records of the table moving forward again, want 1", n)
	}
}

// writeTable writes n's epoch and one entry in one MULTI, as a mover does:
// two separate writes would show the proxy a table at the new epoch
// without the entry, which the same epoch with the entry then contradicts.
func writeTable(t *testing.T, n *node.Node, epoch, queue, entry string) {
	t.Helper()
	c := n.Client(t)
	rs := c.DoMulti(context.Background(), c.B().Multi().Build(),
		c.B().Set().Key("{emqproxy}:epoch").Value(epoch).Build(),
		c.B().Hset().Key("{emqproxy}:queues").FieldValue().FieldValue(queue, entry).Build(),
		c.B().Exec().Build())
	for _, r := range rs {
		if err := r.Error(); err != nil {
			t.Fatalf("writing %s's table: %v", n.Addr, err)
		}
	}
}
