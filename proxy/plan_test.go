package proxy

import (
	"sync/atomic"
	"testing"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
	"go.uber.org/zap"
)

// The plan is a function of what it is given: it runs here on a view of
// two upstreams that were never connected, with no server at all. A command
// whose keys only COMMAND GETKEYS tells yields a step that asks for them,
// and routes by the keys it is then given; a bridged client's HELLO 2 is
// refused while it may be pushed to.
func TestPlanDecidesWithoutTheNetwork(t *testing.T) {
	a, b := offlineUpstream(t, "a"), offlineUpstream(t, "b")
	srv := &Server{ups: []*upstream.Upstream{a, b}, byName: map[string]*upstream.Upstream{"a": a, "b": b}}
	srv.keys.Merge(cmdtable.Table{
		// Key positions the server's specs leave open (as for SORT ... STORE).
		"opencmd": {Name: "opencmd", Arity: -2, Ask: true, Class: cmdtable.ClassOpen},
		"hello":   {Name: "hello", Arity: -1, Class: cmdtable.ClassOpen},
	})
	r, err := srv.compileRoutes([]Route{{Queues: []string{"moved"}, Upstream: "b"}, {Queues: []string{"*"}, Upstream: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	srv.routes.Store(r)
	srv.policy.Store(testPolicy(t))
	s := &session{srv: srv}
	s.st.Fenced = true
	s.v = view{pol: srv.policy.Load(), routes: r}

	args := [][]byte{[]byte("OPENCMD"), []byte("emq:{moved}:k")}
	var sp planStep
	s.plan(args, &sp)
	if !sp.needKeys || sp.up != nil {
		t.Fatalf("a command with open key specs: needKeys %v, up %v; want a step that asks for its keys", sp.needKeys, sp.up)
	}
	sp.keys, sp.asked = [][]byte{[]byte("emq:{moved}:k")}, true
	s.plan(args, &sp)
	if sp.needKeys || sp.up != b {
		t.Fatalf("with its keys given: needKeys %v, up %v; want upstream b", sp.needKeys, sp.up)
	}

	sp = planStep{keys: nil, asked: true} // the server found no key
	s.plan(args, &sp)
	if sp.needKeys || sp.up != a {
		t.Fatalf("no key given: needKeys %v, up %v; want the default upstream a", sp.needKeys, sp.up)
	}

	s.st.Proto = 3
	hello2 := [][]byte{[]byte("HELLO"), []byte("2")}
	sp = planStep{pushes: true}
	s.plan(hello2, &sp)
	if sp.d.Action != rewrite.Refuse || string(sp.d.Reply) != string(replyBridgedHello) {
		t.Fatalf("HELLO 2 while pushed to: %v %q; want the bridge's refusal", sp.d.Action, sp.d.Reply)
	}
	sp = planStep{}
	s.plan(hello2, &sp)
	if sp.d.Action != rewrite.Local || sp.d.Proto != 2 {
		t.Fatalf("HELLO 2 with nothing to push: %v proto %d; want answered", sp.d.Action, sp.d.Proto)
	}
}

// offlineUpstream is a module upstream whose address nothing listens on
// (port 1 on loopback refuses): it is never connected, and never served.
func offlineUpstream(t *testing.T, name string) *upstream.Upstream {
	t.Helper()
	o := UpstreamOptions{Name: name, Address: "127.0.0.1:1", Role: RoleModule, ProbeInterval: -1}
	u, err := upstream.New(o.WithDefaults(), nil, new(cmdtable.Store), new(atomic.Int64), zap.NewNop(), upstream.NopMetrics{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}
