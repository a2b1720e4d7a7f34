package plan

import (
	"testing"

	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// BenchmarkDecide measures the plan per command on the hot path: a plain
// command with a key (the server's keys given, as for one it asked about)
// and a pinned verb's EVALSHA, with one route for every queue and the
// control table off (nothing is looked up past the rule), and with two
// routes and the control table on (keys, queues, route and admission).
// None may allocate.
func BenchmarkDecide(b *testing.B) {
	const sha = "7750f40b44bcdd7e0eaa5a8f2c66391ecbcde7f8" // stand/map.yaml's enqueue
	cmds := []struct {
		name string
		args [][]byte
	}{
		{"keyed", argv("OPENCMD", "emq:{moved}:job:1")},
		{"EVALSHA verb", argv("EVALSHA", sha, "2", "emq:{moved}:job:1", "emq:{moved}:pending", "1", "payload")},
	}
	for _, routed := range []bool{false, true} {
		for _, c := range cmds {
			name := c.name + "/single"
			if routed {
				name = c.name + "/routed+control"
			}
			b.Run(name, func(b *testing.B) {
				s := newStand(b)
				if routed {
					st := NewControlState(1, map[string]bool{}, nil)
					s.v.Ctl, s.v.Loop = st, &loop{cur: st}
				} else {
					s.v.Routes = NewRouter([]Route{{Queues: []string{"*"}, Upstream: "a"}}, []*upstream.Upstream{s.a})
				}
				in := Input{Args: c.args, State: &s.st, View: &s.v, Bind: s.bind, Auth: s, Bufs: &s.bufs}
				sp := Step{Keys: c.args[1:2], Asked: true}
				b.ReportAllocs()
				for b.Loop() {
					Decide(&in, &sp)
					if !sp.Forwards() || sp.Up == nil {
						b.Fatalf("%s: %v %q", c.name, sp.Decision.Action, sp.Decision.Reply)
					}
					if sp.Admitted != nil {
						sp.Admitted.Release(&sp.Slots)
					}
				}
			})
		}
	}
}
