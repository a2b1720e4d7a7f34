package plan

import (
	"testing"

	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// TestQueueRouteIsTheRoutersAnswer: QueueRoute, for a tool that reads a
// configuration, names the upstream Router.ForQueue gives a queue.
func TestQueueRouteIsTheRoutersAnswer(t *testing.T) {
	a, b := offlineUpstream(t, "a", upstream.RoleModule), offlineUpstream(t, "b", upstream.RoleScripts)
	rs := []Route{{Queues: []string{"billing*", "pay"}, Upstream: "b"}, {Queues: []string{"*"}, Upstream: "a"}}
	r := NewRouter(rs, []*upstream.Upstream{b, a})
	for _, q := range []string{"billing", "billing-eu", "pay", "payroll", "quotes", "", "a/b", "billing/x"} {
		if got, want := QueueRoute(rs, q), r.ForQueue([]byte(q)).Name(); got != want {
			t.Errorf("QueueRoute(%q) = %q, the router's %q", q, got, want)
		}
	}
	if got := QueueRoute(nil, "quotes"); got != "" {
		t.Errorf("QueueRoute of no routes = %q", got)
	}
}
