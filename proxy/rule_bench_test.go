package proxy

import (
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/stand/node"
)

// ruleView is a new client's state and the view of a proxy in front of a
// module node, with the node's command table loaded, for calling the rule
// (plan.Rule) directly.
func ruleView(tb testing.TB) (*rewrite.State, *plan.View, *rewrite.Policy) {
	n := node.StartT(tb, node.Options{Role: node.Module})
	h := startProxy(tb, n, nil)
	v := &plan.View{Pol: h.srv.policy.Load(), Routes: h.srv.routes.Load(), Tables: &h.srv.keys}
	return &rewrite.State{}, v, v.Pol
}

// ruleHotPath are commands the rule lets through, as clients send them.
func ruleHotPath(pol *rewrite.Policy) map[string][][]byte {
	enq, _ := pol.Map.ByName("enqueue")
	argv := func(a ...string) [][]byte {
		out := make([][]byte, len(a))
		for i, s := range a {
			out[i] = []byte(s)
		}
		return out
	}
	return map[string][][]byte{
		"GET":             argv("GET", "emq:{q}:job:1"),
		"SET":             argv("SET", "emq:{q}:job:1", "value"),
		"EVALSHA verb":    argv("EVALSHA", enq.SHA, "2", "emq:{q}:job:1", "emq:{q}:pending", "1", "payload"),
		"MSET 8":          argv("MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6", "g", "7", "h", "8"),
		"OBJECT ENCODING": argv("OBJECT", "ENCODING", "emq:{q}:job:1"),
	}
}

// BenchmarkShareRule measures the rule's cost per command against
// rewrite.Decide's in the same run: x_decide is (Decide + rule) / Decide.
func BenchmarkShareRule(b *testing.B) {
	st0, v, pol := ruleView(b)
	for name, args := range ruleHotPath(pol) {
		b.Run(name, func(b *testing.B) {
			st := *st0
			b.ReportAllocs()
			t0 := time.Now()
			for range b.N {
				d := rewrite.Decide(args, &st, pol)
				_ = d
			}
			base := time.Since(t0)
			t1 := time.Now()
			for range b.N {
				d := rewrite.Decide(args, &st, pol)
				plan.Rule(args, &d, st.InMulti, v)
				if d.Action == rewrite.Refuse {
					b.Fatalf("%q refused: %q", args[0], d.Reply)
				}
			}
			with := time.Since(t1)
			b.ReportMetric(float64(with)/float64(max(base, 1)), "x_decide")
			b.ReportMetric(float64((with-base).Nanoseconds())/float64(b.N), "ns_rule/op")
		})
	}
}

// TestShareRuleHotPathDoesNotAllocate: the rule on the commands clients
// send all day allocates nothing.
func TestShareRuleHotPathDoesNotAllocate(t *testing.T) {
	st, v, pol := ruleView(t)
	for name, args := range ruleHotPath(pol) {
		d0 := rewrite.Decide(args, st, pol)
		if n := testing.AllocsPerRun(100, func() { d := d0; plan.Rule(args, &d, st.InMulti, v) }); n != 0 {
			t.Errorf("the rule on %s allocates %v times", name, n)
		}
	}
}
