package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/emqproxy/emqproxy/control"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/stand/node"
)

// gaugeValue reads a gauge without labels from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// renewedAt is the unix ms of the proxy p1's last renewal on n.
func renewedAt(t *testing.T, n *node.Node) int64 {
	t.Helper()
	raw := nodeDo(t, n, "HGET", "{emqproxy}:proxies", "p1")
	var reg struct {
		Renewed int64 `json:"renewed"`
	}
	if i := strings.IndexByte(raw, '{'); i < 0 || json.Unmarshal([]byte(strings.TrimSpace(raw[i:])), &reg) != nil {
		return 0
	}
	return reg.Renewed
}

// TestHostileControlEntriesAreSkippedAndReported: a node's control table
// holds, beside a true hold of billing, entries that do not parse, one
// whose epoch is past its table's (it would hold quotes), queue names with
// braces or empty, and an owner the proxy does not have. The renewals go
// on and are acknowledged; quotes and billing2 are served by their routes,
// billing is held; each bad entry is logged once, counted in
// emqproxy_control_skipped_entries and listed by queue status.
func TestHostileControlEntriesAreSkippedAndReported(t *testing.T) {
	node.EachServer(t, testHostileControlEntries)
}

func testHostileControlEntries(t *testing.T, srv node.Server) {
	pol := testPolicy(t)
	mn := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	scr := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts, Brand: pol.Map.LegacyBrand})
	for _, c := range [][]string{
		{"SET", "{emqproxy}:epoch", "3"},
		{"HSET", "{emqproxy}:queues", "billing", "3 held scripts-b", "garbage", "not-an-entry",
			"quotes", "9 held scripts-b", "{x}", "2 held scripts-b", "", "2 held scripts-b", "billing2", "2 owned nowhere"},
	} {
		nodeDo(t, scr, c...)
	}
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
	r.waitApplied(t, scr, 3) // the renewals were not failed by the bad entries
	c := r.dial()
	c.do("SET", "emq:{quotes}:x", "1").is("+OK\r\n")
	c.do("SET", "emq:{billing2}:x", "1").is("+OK\r\n")
	if got := nodeDo(t, scr, "GET", "emq:{billing2}:x"); got != "$1\r\n1\r\n" {
		t.Errorf("billing2 left its file route: scripts-b has %q", got)
	}
	c.do("SET", "emq:{billing}:x", "1").is("-TRYAGAIN queue billing is moving\r\n")

	// Reported once each, over several rounds.
	first := renewedAt(t, scr)
	poll(t, "several renewals", func() bool { return renewedAt(t, scr) > first+200 })
	skipped := logs.FilterMessageSnippet("control table entry skipped").All()
	queues := map[string]string{}
	for _, e := range skipped {
		m := e.ContextMap()
		queues[m["queue"].(string)] = m["why"].(string)
	}
	if len(skipped) != 5 || len(queues) != 5 {
		t.Errorf("%d skip records for %d queues, want 5 once each: %v", len(skipped), len(queues), queues)
	}
	for q, want := range map[string]string{"garbage": `is not "<epoch> <state> <owner>"`, "quotes": "epoch 9 is past the table's epoch 3",
		"{x}": "is not a queue name", "": "is not a queue name", "billing2": `owner "nowhere" is not an upstream`} {
		if !strings.Contains(queues[q], want) {
			t.Errorf("queue %q skipped for %q, want %q", q, queues[q], want)
		}
	}
	if v := gaugeValue(t, reg, "emqproxy_control_skipped_entries"); v != 5 {
		t.Errorf("emqproxy_control_skipped_entries = %v, want 5", v)
	}

	// queue status lists them.
	nodes := map[string]*table.Node{}
	for name, n := range map[string]*node.Node{"module-a": mn, "scripts-b": scr} {
		cn, err := table.Dial(table.NodeOptions{Name: name, Address: n.Addr})
		if err != nil {
			t.Fatal(err)
		}
		defer cn.Close()
		nodes[name] = cn
	}
	var out bytes.Buffer
	if _, err := control.Status(context.Background(), &out, nodes); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`SKIPPED "garbage": `, `SKIPPED "quotes": entry "9 held scripts-b": epoch 9 is past the table's epoch 3`,
		`SKIPPED "{x}": `, `SKIPPED "": `, `SKIPPED "billing2": owner "nowhere" is not an upstream of this configuration`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("queue status does not show %q:\n%s", want, out.String())
		}
	}

	// Repaired on the node: nothing is skipped any more.
	nodeDo(t, scr, "HDEL", "{emqproxy}:queues", "garbage", "quotes", "{x}", "", "billing2")
	poll(t, "the gauge to fall to 0", func() bool { return gaugeValue(t, reg, "emqproxy_control_skipped_entries") == 0 })
}
