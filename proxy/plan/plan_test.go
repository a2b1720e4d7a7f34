package plan

import (
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// The plan is a function of what it is given: every test here runs it on a
// view of two upstreams that were never connected, with no server at all.

// stand is a plan's inputs: upstreams a (the default route) and b (queue
// "moved"), a command table of a few entries, and the session's state.
type stand struct {
	t     testing.TB
	a, b  *upstream.Upstream
	ks    cmdtable.Store
	v     View
	st    rewrite.State
	tx    TxRoute
	bufs  Bufs
	bind  Binding
	fails int // failed authentications counted (Auth)
}

// AuthFailed implements Auth.
func (s *stand) AuthFailed() time.Duration { s.fails++; return 3 * time.Second }

func newStand(t testing.TB) *stand {
	s := &stand{t: t, a: offlineUpstream(t, "a", upstream.RoleModule), b: offlineUpstream(t, "b", upstream.RoleModule)}
	s.ks.Merge(cmdtable.Table{
		// Key positions the server's specs leave open (as for SORT ... STORE).
		"opencmd":  {Name: "opencmd", Arity: -2, Ask: true, Class: cmdtable.ClassOpen, Label: "OPENCMD"},
		"writecmd": {Name: "writecmd", Arity: -2, Ask: true, Class: cmdtable.ClassOpen, Label: "WRITECMD", Traits: cmdtable.TraitWrite},
		"hello":    {Name: "hello", Arity: -1, Class: cmdtable.ClassOpen, Label: "HELLO"},
		"move":     {Name: "move", Arity: 3, Class: cmdtable.ClassOpen, Label: "MOVE"},
		"admincmd": {Name: "admincmd", Arity: -2, Class: cmdtable.ClassAdmin, Label: "ADMINCMD", Traits: cmdtable.TraitAdmin},
		"nomulti":  {Name: "nomulti", Arity: 1, NoMulti: true, Class: cmdtable.ClassOpen, Label: "NOMULTI"},
	})
	m, err := shamap.Load(filepath.Join("..", "..", "stand", "map.yaml"))
	if err != nil {
		t.Fatalf("load map: %v", err)
	}
	s.v = View{Pol: &rewrite.Policy{Map: m}, Tables: &s.ks,
		Routes: NewRouter([]Route{{Queues: []string{"moved"}, Upstream: "b"}, {Queues: []string{"*"}, Upstream: "a"}},
			[]*upstream.Upstream{s.b, s.a})}
	s.st.Fenced = true
	s.bind.Tx = &s.tx
	return s
}

// decide runs the plan on args into sp.
func (s *stand) decide(sp *Step, args ...string) {
	in := Input{Args: argv(args...), State: &s.st, View: &s.v, Bind: s.bind, Auth: s, Bufs: &s.bufs}
	Decide(&in, sp)
}

func argv(a ...string) [][]byte {
	out := make([][]byte, len(a))
	for i, s := range a {
		out[i] = []byte(s)
	}
	return out
}

// offlineUpstream is an upstream whose address nothing listens on (port 1
// on loopback refuses): it is never connected, and never served.
func offlineUpstream(t testing.TB, name string, role upstream.Role) *upstream.Upstream {
	t.Helper()
	o := upstream.Options{Name: name, Address: "127.0.0.1:1", Role: role, ProbeInterval: -1}
	u, err := upstream.New(o.WithDefaults(), nil, new(cmdtable.Store), new(atomic.Int64), zap.NewNop(), upstream.NopMetrics{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

// A command whose keys only COMMAND GETKEYS tells yields a step that asks
// for them, and routes by the keys it is then given; a bridged client's
// HELLO 2 is refused while it may be pushed to.
func TestPlanDecidesWithoutTheNetwork(t *testing.T) {
	s := newStand(t)
	var sp Step
	s.decide(&sp, "OPENCMD", "emq:{moved}:k")
	if !sp.NeedKeys || sp.Up != nil {
		t.Fatalf("a command with open key specs: needKeys %v, up %v; want a step that asks for its keys", sp.NeedKeys, sp.Up)
	}
	sp.Keys, sp.Asked = argv("emq:{moved}:k"), true
	s.decide(&sp, "OPENCMD", "emq:{moved}:k")
	if sp.NeedKeys || sp.Up != s.b || !sp.Keyed {
		t.Fatalf("with its keys given: needKeys %v, up %v, keyed %v; want upstream b, keyed", sp.NeedKeys, sp.Up, sp.Keyed)
	}

	sp = Step{Keys: nil, Asked: true} // the server found no key
	s.decide(&sp, "OPENCMD", "emq:{moved}:k")
	if sp.NeedKeys || sp.Up != s.a {
		t.Fatalf("no key given: needKeys %v, up %v; want the default upstream a", sp.NeedKeys, sp.Up)
	}

	s.st.Proto = 3
	sp = Step{Pushes: true}
	s.decide(&sp, "HELLO", "2")
	if sp.Decision.Action != rewrite.Refuse || string(sp.Decision.Reply) != string(replyBridgedHello) {
		t.Fatalf("HELLO 2 while pushed to: %v %q; want the bridge's refusal", sp.Decision.Action, sp.Decision.Reply)
	}
	sp = Step{}
	s.decide(&sp, "HELLO", "2")
	if sp.Decision.Action != rewrite.Local || sp.Decision.Proto != 2 {
		t.Fatalf("HELLO 2 with nothing to push: %v proto %d; want answered", sp.Decision.Action, sp.Decision.Proto)
	}
}

// refused checks that sp is a refusal with reply and reason.
func refused(t *testing.T, what string, sp *Step, reply string, reason rewrite.Reason) {
	t.Helper()
	d := &sp.Decision
	if d.Action != rewrite.Refuse || string(d.Reply) != reply || d.Reason != reason || sp.Up != nil {
		t.Errorf("%s: %v %q %q up %v; want refused %q %q", what, d.Action, d.Reply, d.Reason, sp.Up, reply, reason)
	}
}

// Keys that route to two upstreams, or away from the session's binding,
// are refused with CROSSROUTE; inside MULTI the refusal aborts the
// transaction.
func TestPlanRefusesCrossRoutes(t *testing.T) {
	s := newStand(t)
	sp := Step{Keys: argv("emq:{moved}:k", "emq:{other}:k"), Asked: true}
	s.decide(&sp, "OPENCMD", "emq:{moved}:k", "emq:{other}:k")
	refused(t, "two upstreams", &sp, "-CROSSROUTE the keys of 'OPENCMD' route to upstreams b and a; emqproxy does not split one command across upstreams\r\n", ReasonCrossRoute)

	s.bind.Pin = s.a
	sp = Step{Keys: argv("emq:{moved}:k"), Asked: true}
	s.decide(&sp, "opencmd", "emq:{moved}:k")
	refused(t, "pinned", &sp, "-CROSSROUTE 'OPENCMD' routes to upstream b but WATCH pinned the connection to a; emqproxy does not split a WATCH ... EXEC across upstreams\r\n", ReasonCrossRoute)
	sp = Step{Keys: argv("emq:{q}:k"), Asked: true}
	s.decide(&sp, "OPENCMD", "emq:{q}:k")
	if sp.Up != s.a {
		t.Errorf("pinned, same upstream: up %v; want a", sp.Up)
	}

	s.bind.Pin = nil
	s.st.InMulti = true
	sp = Step{Keys: argv("emq:{q}:k"), Asked: true}
	s.decide(&sp, "OPENCMD", "emq:{q}:k")
	s.tx.Note(&sp)
	sp = Step{Keys: argv("emq:{moved}:k"), Asked: true}
	s.decide(&sp, "OPENCMD", "emq:{moved}:k")
	refused(t, "in a transaction", &sp, "-CROSSROUTE 'OPENCMD' routes to upstream b but the transaction's earlier commands route to a; emqproxy does not split a transaction across upstreams\r\n", ReasonCrossRoute)
	if sp.Decision.Effect != rewrite.AbortMulti {
		t.Errorf("a refusal inside MULTI: effect %v, want AbortMulti", sp.Decision.Effect)
	}
}

// loop is a control loop for the plan: the leases it says are valid, and
// the state in force.
type loop struct {
	cur    *ControlState
	lapsed map[*upstream.Upstream]bool
}

func (l *loop) Leased(u *upstream.Upstream, _ time.Time) bool { return !l.lapsed[u] }
func (l *loop) Current() *ControlState                        { return l.cur }

// With the control table on, a command for a held queue, or one routed to
// a node whose lease lapsed, waits; an admitted one counts in flight in the
// state it was admitted under; a state replaced meanwhile makes the step
// stale, counting nothing; past the hold (WaitedOut) what would wait is
// refused with TRYAGAIN.
func TestPlanAdmitsUnderTheControlState(t *testing.T) {
	s := newStand(t)
	st := NewControlState(1, map[string]bool{"held": true}, map[string]*upstream.Upstream{})
	l := &loop{cur: st, lapsed: map[*upstream.Upstream]bool{}}
	s.v.Ctl, s.v.Loop = st, l
	at := func(key string) *Step {
		sp := &Step{Keys: argv(key), Asked: true}
		s.decide(sp, "OPENCMD", key)
		return sp
	}

	// (Which queue and node a wait is for is what the refusal past the
	// hold names: below.)
	if sp := at("emq:{held}:k"); !sp.Wait || sp.Admitted != nil {
		t.Errorf("held queue: wait %v admitted %v; want a wait", sp.Wait, sp.Admitted)
	}
	l.lapsed[s.b] = true
	if sp := at("emq:{moved}:k"); !sp.Wait || sp.Admitted != nil {
		t.Errorf("lease on b lapsed: wait %v admitted %v; want a wait", sp.Wait, sp.Admitted)
	}
	free := at("emq:{q}:k")
	if free.Wait || free.Admitted != st || st.InFlight() != 1 || st.QueueInFlight("q") != 1 {
		t.Errorf("free queue: wait %v admitted %v in flight %d (queue q %d); want admitted under the state",
			free.Wait, free.Admitted, st.InFlight(), st.QueueInFlight("q"))
	}
	if SlotOf([]byte("q")) != SlotOf([]byte("other")) && st.QueueInFlight("other") != 0 {
		t.Errorf("queue other counts %d in flight; want 0 (only q's slot counts)", st.QueueInFlight("other"))
	}
	st.Release(&free.Slots)
	if st.InFlight() != 0 || st.QueueInFlight("q") != 0 {
		t.Errorf("released: in flight %d (queue q %d); want 0", st.InFlight(), st.QueueInFlight("q"))
	}
	if sp := at("nohashtag"); sp.Wait || sp.Admitted != nil || st.InFlight() != 0 {
		t.Errorf("no queue: wait %v admitted %v; want neither", sp.Wait, sp.Admitted)
	}

	l.cur = NewControlState(2, map[string]bool{}, map[string]*upstream.Upstream{})
	if sp := at("emq:{q}:k"); !sp.Stale || sp.Admitted != nil || st.InFlight() != 0 {
		t.Errorf("state replaced: stale %v admitted %v in flight %d; want stale, nothing counted", sp.Stale, sp.Admitted, st.InFlight())
	}

	// Past the hold (WaitedOut) the plan refuses what it would wait for,
	// and admits what it may send.
	l.cur = st
	out := func(key string) *Step {
		sp := &Step{Keys: argv(key), Asked: true, WaitedOut: true}
		s.decide(sp, "OPENCMD", key)
		return sp
	}
	if sp := out("emq:{held}:k"); sp.Wait || sp.Up != nil || sp.Admitted != nil || sp.Decision.Action != rewrite.Refuse ||
		string(sp.Decision.Reply) != "-TRYAGAIN queue held is moving\r\n" || sp.Decision.Reason != ReasonHeld {
		t.Errorf("held queue, waited out: wait %v up %v %q %q; want TRYAGAIN", sp.Wait, sp.Up, sp.Decision.Reply, sp.Decision.Reason)
	}
	if sp := out("emq:{moved}:k"); sp.Decision.Action != rewrite.Refuse ||
		string(sp.Decision.Reply) != "-TRYAGAIN queue moved has no lease on upstream b\r\n" {
		t.Errorf("lapsed lease, waited out: %q", sp.Decision.Reply)
	}
	if sp := out("emq:{q}:k"); sp.Decision.Action == rewrite.Refuse || sp.Admitted != st {
		t.Errorf("free queue, waited out: %q admitted %v; want admitted", sp.Decision.Reply, sp.Admitted)
	} else {
		st.Release(&sp.Slots)
	}

	var d rewrite.Decision
	refuseHeld(&d, []byte("moved"), s.b, true)
	if string(d.Reply) != "-TRYAGAIN queue moved has no lease on upstream b\r\n" || d.Effect != rewrite.AbortMulti {
		t.Errorf("refuseHeld inside MULTI: %q %v", d.Reply, d.Effect)
	}
}

// A wrong password is counted once through Auth, and its delay is the
// step's.
func TestPlanCountsAFailedAuth(t *testing.T) {
	s := newStand(t)
	s.v.Pol.Users = map[string]string{"default": "secret"}
	var sp Step
	s.decide(&sp, "AUTH", "guess")
	if sp.Decision.Reason != rewrite.ReasonWrongPass || s.fails != 1 || sp.AuthWait != 3*time.Second {
		t.Errorf("AUTH guess: %q, %d counted, wait %v; want one failure, its wait", sp.Decision.Reason, s.fails, sp.AuthWait)
	}
	s.decide(&sp, "AUTH", "secret")
	if s.fails != 1 || sp.AuthWait != 0 {
		t.Errorf("AUTH secret: %d counted, wait %v", s.fails, sp.AuthWait)
	}
}

// The shared-connection rule, from the table it is given.
func TestRuleFromTheTable(t *testing.T) {
	s := newStand(t)
	var sp Step
	s.decide(&sp, "MOVE", "k", "3")
	refused(t, "MOVE to another database", &sp, "-EMQREFUSED emqproxy does not forward 'MOVE': shared-connection rule database: it names database 3; this proxy serves database 0 only\r\n", "rule_database")
	s.decide(&sp, "ADMINCMD", "x")
	if d := &sp.Decision; d.Action != rewrite.Refuse || d.Reason != "rule_admin" ||
		!strings.HasPrefix(string(d.Reply), "-EMQREFUSED emqproxy does not forward 'ADMINCMD': shared-connection rule admin: ") {
		t.Errorf("ADMINCMD: %v %q %q", d.Action, d.Reply, d.Reason)
	}
	s.v.Pol.Allow = map[string]bool{"ADMINCMD": true}
	if s.decide(&sp, "ADMINCMD", "x"); sp.Decision.Action != rewrite.Pass || sp.Entry == nil || sp.Entry.Label != "ADMINCMD" {
		t.Errorf("ADMINCMD allowed: %v %v", sp.Decision.Action, sp.Entry)
	}
	sp = Step{Asked: true}
	s.decide(&sp, "WRITECMD", "{emqproxy}:queues")
	refused(t, "a write to a control key", &sp, "-FENCE {emqproxy}:queues belongs to emqproxy; write refused\r\n", ReasonControlKey)
	sp = Step{Asked: true}
	if s.decide(&sp, "OPENCMD", "{emqproxy}:queues"); sp.Decision.Action != rewrite.Pass {
		t.Errorf("a command the table does not flag write, on a control key: %v %q", sp.Decision.Action, sp.Decision.Reply)
	}

	for _, tc := range []struct{ arg, want string }{
		{"maxmemory", ""},
		{"requirepass", "parameter 'requirepass' holds a credential of the node"},
		{"masteruser", "parameter 'masteruser' holds a credential of the node"},
		{"*max*", "a pattern may match a parameter that holds a credential; name the parameters one by one"},
	} {
		if got := credentialParam([]byte(tc.arg)); got != tc.want {
			t.Errorf("credentialParam(%q) = %q, want %q", tc.arg, got, tc.want)
		}
	}
	if got := otherDB([]byte("3"), 0); got != "it names database 3; this proxy serves database 0 only" {
		t.Errorf("otherDB 3: %q", got)
	}
	if got := otherDB([]byte("x"), 0) + otherDB([]byte("2"), 2); got != "" {
		t.Errorf("otherDB of a non-integer or the configured database: %q", got)
	}
}

// Inside MULTI, and before authentication, the server's own errors from
// its table.
func TestPlanQueueTimeAndCommandErrors(t *testing.T) {
	s := newStand(t)
	s.st.InMulti = true
	var sp Step
	s.decide(&sp, "NOMULTI")
	refused(t, "a no-multi command", &sp, "-ERR Command not allowed inside a transaction\r\n", ReasonNoMulti)
	if sp.Decision.Effect != rewrite.AbortMulti {
		t.Errorf("no-multi: effect %v, want AbortMulti", sp.Decision.Effect)
	}
	s.decide(&sp, "NOSUCH", "a\r\nb")
	refused(t, "an unknown command", &sp, "-ERR unknown command 'NOSUCH', with args beginning with: 'a  b' \r\n", ReasonUnknownCommand)

	s.st.InMulti = false
	s.v.Pol.Users = map[string]string{"default": "secret"}
	s.decide(&sp, "NOMULTI", "extra")
	refused(t, "wrong arity before AUTH", &sp, "-ERR wrong number of arguments for 'nomulti' command\r\n", rewrite.ReasonArity)
}

func TestQueueErrorWithoutATableQueues(t *testing.T) {
	var ks cmdtable.Store
	if reply, _ := queueError(&ks, argv("NOSUCHCOMMAND")); reply != nil {
		t.Errorf("no table loaded, yet %q", reply)
	}
	ks.Merge(cmdtable.Table{"get": {Name: "get", Arity: 2}})
	if reply, reason := queueError(&ks, argv("GET")); string(reply) != "-ERR wrong number of arguments for 'get' command\r\n" || reason != "arity" {
		t.Errorf("GET: %q %q", reply, reason)
	}
	if reply, _ := queueError(&ks, argv("get", "k")); reply != nil {
		t.Errorf("GET k: %q", reply)
	}
}

// Deciding a routed command allocates nothing: its keys borrow the
// session's Bufs.
func TestPlanDoesNotAllocate(t *testing.T) {
	s := newStand(t)
	st := NewControlState(1, map[string]bool{}, map[string]*upstream.Upstream{})
	s.v.Ctl, s.v.Loop = st, &loop{cur: st}
	args := argv("OPENCMD", "emq:{moved}:k", "emq:{moved}:l")
	in := Input{Args: args, State: &s.st, View: &s.v, Bind: s.bind, Auth: s, Bufs: &s.bufs}
	var sp Step
	n := testing.AllocsPerRun(100, func() {
		sp = Step{Keys: args[1:], Asked: true}
		Decide(&in, &sp)
		if sp.Admitted != nil {
			sp.Admitted.Release(&sp.Slots)
		}
	})
	if n != 0 || sp.Up != s.b {
		t.Errorf("Decide allocates %v times (up %v)", n, sp.Up)
	}
}

// TestControlStateMoved: a command admitted under a state may not be sent
// under a newer one that holds, releases or re-routes one of its queues;
// other queues' commands may.
func TestControlStateMoved(t *testing.T) {
	a, b := &upstream.Upstream{}, &upstream.Upstream{}
	old := NewControlState(1, map[string]bool{"held": true}, map[string]*upstream.Upstream{"moved": a, "same": a})
	cur := NewControlState(2, map[string]bool{"fresh": true}, map[string]*upstream.Upstream{"moved": b, "same": a})
	got := old.ChangedTo(cur)
	slices.Sort(got)
	if want := []string{"fresh", "held", "moved"}; !slices.Equal(got, want) {
		t.Fatalf("changed %v; want %v", got, want)
	}
	of := func(q string) *Slots {
		var s Slots
		s.Add([]byte(q))
		return &s
	}
	for _, q := range []string{"fresh", "held", "moved"} {
		if !old.Moved(cur, of(q)) {
			t.Errorf("queue %s changed, Moved false; want true", q)
		}
		if old.Moved(old, of(q)) {
			t.Errorf("queue %s under its own state: Moved true; want false", q)
		}
	}
	for _, q := range []string{"same", "other"} {
		if s := of(q); !s.Has("fresh") && !s.Has("held") && !s.Has("moved") && old.Moved(cur, s) {
			t.Errorf("queue %s unchanged: Moved true; want false", q)
		}
	}
}
