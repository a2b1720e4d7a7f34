package plan

import (
	"maps"
	"path"
	"slices"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Routing by queue: the plan's part (package proxy's route.go has the
// routes' rules and the Server's API over them).
//
// A command is routed by the keys the plan found (plan.go): a key with a
// hashtag goes where its queue's route says, a key without one (and a
// command without keys) goes to the default route. Keys that route to two
// upstreams, or a command routed away from the upstream the session is
// bound to, are refused with CROSSROUTE before anything is sent.

// ReasonCrossRoute is the refusal reason (audit log, metrics) of a command,
// or a command queued in MULTI, whose keys route to two upstreams.
const ReasonCrossRoute rewrite.Reason = "crossroute"

// Route sends the queues matching any of its globs to an upstream.
type Route struct {
	// Queues are path.Match globs over a queue name (the hashtag content).
	Queues []string
	// Upstream is the name of one of the server's upstreams.
	Upstream string
}

// Router is one compiled set of routes. It is never modified once built.
type Router struct {
	routes []compiledRoute
	def    *upstream.Upstream            // the last route's upstream
	single bool                          // every route leads to def: no key needs looking at
	spec   []Route                       // the routes as given
	exact  map[string]*upstream.Upstream // moved queues' owners from the control table
}

// compiledRoute is one route with its upstream resolved.
type compiledRoute struct {
	globs []string
	up    *upstream.Upstream
}

// NewRouter builds the router of routes rs, whose upstreams ups are, in
// order, those the routes name. The caller has checked them (package
// proxy's compileRoutes): rs is not empty, ups as long as rs, every glob
// valid, and the last route matches every queue ("*").
func NewRouter(rs []Route, ups []*upstream.Upstream) *Router {
	r := &Router{single: true}
	for i, rt := range rs {
		r.routes = append(r.routes, compiledRoute{globs: slices.Clone(rt.Queues), up: ups[i]})
	}
	r.def = r.routes[len(r.routes)-1].up
	for _, rt := range r.routes {
		if rt.up != r.def {
			r.single = false
		}
	}
	for _, rt := range rs {
		r.spec = append(r.spec, Route{Queues: slices.Clone(rt.Queues), Upstream: rt.Upstream})
	}
	return r
}

// Default is the default route's upstream (the last route's).
func (r *Router) Default() *upstream.Upstream { return r.def }

// Spec returns the routes as given (not a copy: the caller must not change
// them).
func (r *Router) Spec() []Route { return r.spec }

// ForQueue returns the upstream of the first route matching queue (a moved
// queue's owner first).
func (r *Router) ForQueue(queue []byte) *upstream.Upstream {
	if r.exact != nil {
		if u := r.exact[string(queue)]; u != nil {
			return u
		}
	}
	if r.single {
		return r.def
	}
	q := string(queue)
	for _, rt := range r.routes {
		if matchAny(rt.globs, q) {
			return rt.up
		}
	}
	return r.def
}

// QueueRoute returns the name of the upstream routes rs send queue to,
// the answer Router.ForQueue gives for routes alone, without the running
// proxy's upstreams or moved queues: for a tool that reads the
// configuration (the mover's and the leftovers' route of a queue). When
// no route matches (rs unchecked: the last must match every queue), it is
// the last route's upstream; "" when rs is empty.
func QueueRoute(rs []Route, queue string) string {
	if len(rs) == 0 {
		return ""
	}
	for _, rt := range rs {
		if matchAny(rt.Queues, queue) {
			return rt.Upstream
		}
	}
	return rs[len(rs)-1].Upstream
}

// matchAny reports whether queue matches one of the path.Match globs; "*"
// matches every queue (a '/' in the name too).
func matchAny(globs []string, queue string) bool {
	for _, g := range globs {
		if g == "*" {
			return true
		}
		if ok, _ := path.Match(g, queue); ok {
			return true
		}
	}
	return false
}

// WithOwners returns r with the moved queues' owners (the control table's)
// in front of its routes, or r itself when there are none.
func (r *Router) WithOwners(owner map[string]*upstream.Upstream) *Router {
	if len(owner) == 0 {
		return r
	}
	nr := *r
	nr.exact = maps.Clone(owner)
	for _, u := range owner {
		if u != r.def {
			nr.single = false
		}
	}
	return &nr
}

// TxRoute is what a session's transaction tells of its route while it
// queues: the upstream it is bound to, the queues of what it queued, and
// the role its verb calls were encoded for. The session keeps it (in its
// transaction) and Decide reads it (Binding.Tx).
type TxRoute struct {
	// up is the upstream the transaction is bound to while it queues: the
	// route of its first queued command with keys (or script call); nil
	// while none. A queued command routed elsewhere is refused.
	up *upstream.Upstream
	// qbuf and qend are the queued commands' queues (qbuf[qend[i-1]:qend[i]]):
	// EXEC is admitted by them (admit.go) and routed where they route then;
	// defKeyed: a queued command has a key with no queue (the default
	// route's).
	qbuf     []byte
	qend     []int
	defKeyed bool
	// verbs counts the queued verb calls, encoded for verbRole (a rewrite
	// on a module node, the client's EVALSHA on a scripts node).
	verbs    int
	verbRole upstream.Role
}

// Note notes what a queued command, decided into sp, tells of the
// transaction's route: the upstream it binds to, its queues and its verb
// calls' role.
func (t *TxRoute) Note(sp *Step) {
	if !sp.Keyed {
		return
	}
	if t.up == nil {
		t.up = sp.Up
	}
	if len(sp.Queues) == 0 {
		t.defKeyed = true // a script call without keys
	}
	for _, q := range sp.Queues {
		if q == nil {
			t.defKeyed = true
			continue
		}
		t.qbuf = append(t.qbuf, q...)
		t.qend = append(t.qend, len(t.qbuf))
	}
	if d := &sp.Decision; d.Script != nil && d.Script.Verb != "" && sp.Up != nil {
		t.verbs++
		t.verbRole = sp.Up.Role()
	}
}

// Forget drops what the transaction knows of its route.
func (t *TxRoute) Forget() {
	t.up = nil
	t.qbuf, t.qend = t.qbuf[:0], t.qend[:0]
	t.defKeyed = false
	t.verbs = 0
}

// eachQueue calls f with each queued command's queue.
func (t *TxRoute) eachQueue(f func(q []byte)) {
	at := 0
	for _, end := range t.qend {
		f(t.qbuf[at:end])
		at = end
	}
}

// appendQueues appends the queued commands' queues to qs.
func (t *TxRoute) appendQueues(qs [][]byte) [][]byte {
	t.eachQueue(func(q []byte) { qs = append(qs, q) })
	return qs
}

// routeDecision chooses the upstream of a forwarded command by the keys the
// plan found and adjusts the decision to it:
//
//   - keys that route to two upstreams, or a command routed away from the
//     upstream the session is bound to (a WATCH pin, the transaction's
//     earlier commands), turn the decision into a
//     CROSSROUTE refusal (AbortMulti inside MULTI), so nothing of it is sent;
//   - at EXEC the route is recomputed from the queues the transaction
//     queued, under the routes of now: a queue that moved since goes to its
//     new owner (execRoute);
//   - on a scripts upstream a verb rewrite becomes a pass: the call leaves
//     as the client's own EVALSHA. A declared read stays EVALSHA_RO there
//     too: a read is a read on either node, and a script declared one by
//     mistake fails on the scripts node, before its queue moves, rather
//     than on the module node after (every upstream has EVALSHA_RO: the
//     key specs routing reads from COMMAND are Redis 7.0's).
//
// It returns nil for a decision that forwards nothing.
func routeDecision(in *Input, sp *Step) *upstream.Upstream {
	d := &sp.Decision
	r := in.View.Routes
	inMulti := in.State.InMulti
	if d.Effect == rewrite.Exec && inMulti {
		return execRoute(r, d, &in.Bind)
	}
	bound, why := in.Bind.bound(inMulti)
	u, keyed, other := keysRoute(r, sp.Queues)
	keyed = keyed || sp.Script
	switch {
	case other != nil:
		crossRoute(d, "the keys of '"+cmdName(in.Args)+"' route to upstreams "+u.Name()+" and "+other.Name()+
			"; emqproxy does not split one command across upstreams", inMulti)
		return nil
	case bound != nil && keyed && u != bound:
		crossRoute(d, "'"+cmdName(in.Args)+"' routes to upstream "+u.Name()+" but "+why+" "+bound.Name()+
			"; emqproxy does not split "+whatSplit(why)+" across upstreams", inMulti)
		return nil
	case bound != nil:
		u = bound
	}
	sp.Keyed = keyed
	if u.Role() == upstream.RoleScripts && d.Action == rewrite.Rewrite && d.Script != nil && d.Script.Verb != "" {
		d.Action, d.Head, d.Replace = rewrite.Pass, "", 0
	}
	return u
}

// execRoute is the upstream of a transaction's EXEC: where the queues of
// its queued commands route now (the default route for keyed commands
// without a queue, and for a transaction with no keyed command), the WATCH
// pin's or the bridged connection's when the session is bound. Queues that
// now route to two upstreams, or away from the binding, refuse EXEC with
// CROSSROUTE; script calls queued for a node of the other role (the queue
// moved between a scripts and a module node since) with TRYAGAIN: they
// were encoded for that role. A refused EXEC ends the transaction.
func execRoute(r *Router, d *rewrite.Decision, b *Binding) *upstream.Upstream {
	var u, other *upstream.Upstream
	pick := func(k *upstream.Upstream) {
		switch {
		case u == nil:
			u = k
		case k != u && other == nil:
			other = k
		}
	}
	tx := b.Tx
	tx.eachQueue(func(q []byte) { pick(r.ForQueue(q)) })
	if tx.defKeyed {
		pick(r.def)
	}
	// EXEC is decided inside MULTI: a refusal of it ends the transaction.
	const inMulti = true
	if other != nil {
		crossRoute(d, "the transaction's queued commands now route to upstreams "+u.Name()+" and "+other.Name()+
			"; emqproxy does not split a transaction across upstreams", inMulti)
		return nil
	}
	switch watched := b.watched(); {
	case watched != nil:
		if u != nil && u != watched {
			crossRoute(d, "the transaction's queued commands route to upstream "+u.Name()+
				" but WATCH pinned the connection to "+watched.Name()+"; emqproxy does not split a WATCH ... EXEC across upstreams", inMulti)
			return nil
		}
		u = watched
	case u == nil:
		u = r.def
	}
	if tx.verbs > 0 && u.Role() != tx.verbRole {
		refuseWith(d, clienterr.TryAgain, "the transaction's queue moved to upstream "+u.Name()+
			" since its script calls were queued; run the transaction again", ReasonHeld, inMulti)
		return nil
	}
	return u
}

// watched is the upstream WATCH bound the session to: the pin's, or a
// bridged client's WATCH leg's; nil for none.
func (b *Binding) watched() *upstream.Upstream {
	if b.Pin != nil {
		return b.Pin
	}
	return b.Leg
}

// bound returns the upstream the session is bound to, and why: the WATCH
// pin's (a bridged client's WATCH leg's), or, inside MULTI, the
// transaction's.
func (b *Binding) bound(inMulti bool) (*upstream.Upstream, string) {
	switch watched := b.watched(); {
	case watched != nil:
		return watched, "WATCH pinned the connection to"
	case inMulti && b.Tx.up != nil:
		return b.Tx.up, "the transaction's earlier commands route to"
	}
	return nil, ""
}

// whatSplit names what a bound session must not split.
func whatSplit(why string) string {
	if why == "WATCH pinned the connection to" {
		return "a WATCH ... EXEC"
	}
	return "a transaction"
}

// crossRoute turns d into the CROSSROUTE refusal with text.
func crossRoute(d *rewrite.Decision, text string, inMulti bool) {
	refuseWith(d, clienterr.CrossRoute, text, ReasonCrossRoute, inMulti)
}

// keysRoute routes a command by its keys' queues (the plan's, one per key,
// nil for a key without one): u is the upstream of the first key, keyed
// whether it has one (false: the default route); other is a second
// upstream some other key routes to, if any.
func keysRoute(r *Router, qs [][]byte) (u *upstream.Upstream, keyed bool, other *upstream.Upstream) {
	for _, q := range qs {
		k := r.def
		if q != nil {
			k = r.ForQueue(q)
		}
		switch {
		case u == nil:
			u = k
		case k != u && other == nil:
			other = k
		}
	}
	if u == nil {
		return r.def, false, nil
	}
	return u, true, other
}
