package proxy

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestControlHoldsEveryQueueUntilEveryTableWasRead: a proxy started while
// a node is unreachable used to merge the tables it could read and route
// by them. The entry that decides a queue may be on that node alone (a
// flip whose write on the source was lost, a release or an abort written
// on the source only): here module-a, frozen when the proxy starts, owns
// billing at epoch 3 (the flip), while scripts-b's own table still says
// billing is owned by scripts-b at epoch 2, as the file's route does. The
// proxy must not send billing's commands to scripts-b, whose lease is
// valid: until it has read every upstream's table once, it holds every
// queue's commands (keyless ones pass; the others get TRYAGAIN past the
// hold, nothing sent), then routes by the whole table.
func TestControlHoldsEveryQueueUntilEveryTableWasRead(t *testing.T) {
	pol := testPolicy(t)
	mn := node.StartT(t, node.Options{Role: node.Module})
	scr := node.StartT(t, node.Options{Role: node.Scripts, Brand: pol.Map.LegacyBrand})
	nodeDo(t, scr, "SET", "{emqproxy}:epoch", "2")
	nodeDo(t, scr, "HSET", "{emqproxy}:queues", "billing", "2 owned scripts-b")
	nodeDo(t, mn, "SET", "{emqproxy}:epoch", "3")
	nodeDo(t, mn, "HSET", "{emqproxy}:queues", "billing", "3 owned module-a")
	if err := mn.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := mn.Thaw(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw)

	opts := Options{
		Policy:    pol,
		Upstreams: billingUpstreams(pol, mn, scr),
		Routes:    billingRoutes,
		Control:   &ControlOptions{Poll: 100 * time.Millisecond, Lease: time.Second, Hold: time.Second, ID: "p1"},
	}
	srv, addr := serveProxy(t, opts, zap.NewNop(), zap.NewNop())
	r := &routed{harness: &harness{t: t, node: mn, srv: srv, addr: addr}, module: mn, scripts: scr}
	// The proxy renewed its lease on scripts-b and read its table, and
	// has the command tables (read from scripts-b, the only upstream
	// that answers): until then every command is refused as the default
	// upstream's unavailable, whatever its queue.
	r.waitApplied(t, scr, 2)
	poll(t, "the command tables", func() bool { return srv.keys.Index() != nil })
	c := r.dial()
	rep, took := timed(c, "PING")
	rep.is("+PONG\r\n")
	if took > time.Second {
		t.Errorf("a keyless command waited %v", took)
	}

	rep, took = timed(c, "SET", "emq:{billing}:x", "1")
	rep.is("-TRYAGAIN queue billing has no lease on upstream scripts-b\r\n")
	if took < 900*time.Millisecond {
		t.Errorf("billing's command was refused after %v, without waiting for the hold (1s)", took)
	}
	if got := nodeDo(t, scr, "EXISTS", "emq:{billing}:x"); got != ":0\r\n" {
		t.Errorf("billing's command went to scripts-b, by the tables the proxy could read")
	}

	// module-a back: its table is read, and billing goes to its owner.
	thaw()
	r.waitReady()
	poll(t, "module-a's table read", func() bool { return srv.RouteFor("billing") == "module-a" })
	c.do("SET", "emq:{billing}:x", "2").is("+OK\r\n")
	if got := nodeDo(t, mn, "GET", "emq:{billing}:x"); got != "$1\r\n2\r\n" {
		t.Errorf("module-a, billing's owner by every table, has %q", got)
	}
	if got := nodeDo(t, scr, "EXISTS", "emq:{billing}:x"); got != ":0\r\n" {
		t.Errorf("billing's command went to scripts-b")
	}
}
