package proxy

import (
	"github.com/tidwall/redcon"

	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// ReasonCrossRoute is the refusal reason (audit log, metrics) of a command,
// or a command queued in MULTI, whose keys route to two upstreams.
const ReasonCrossRoute rewrite.Reason = "crossroute"

// routeDecision chooses the upstream of a forwarded command (route.go) by
// the keys the plan found (plan.go) and adjusts the decision to it:
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
func (s *session) routeDecision(args [][]byte, sp *planStep) *upstream.Upstream {
	d := &sp.d
	r := s.v.routes
	if d.Effect == rewrite.Exec && s.st.InMulti {
		return s.execRoute(r, d)
	}
	bound, why := s.bound()
	u, first, other := keysRoute(r, sp.cmdKeys)
	keyed := first != nil || sp.script
	switch {
	case other != nil:
		s.crossRoute(d, "the keys of '"+cmdName(args)+"' route to upstreams "+u.Name()+" and "+other.Name()+
			"; emqproxy does not split one command across upstreams")
		return nil
	case bound != nil && keyed && u != bound:
		s.crossRoute(d, "'"+cmdName(args)+"' routes to upstream "+u.Name()+" but "+why+" "+bound.Name()+
			"; emqproxy does not split "+whatSplit(why)+" across upstreams")
		return nil
	case bound != nil:
		u = bound
	}
	sp.keyed = keyed
	if u.Role() == RoleScripts && d.Action == rewrite.Rewrite && d.Script != nil && d.Script.Verb != "" {
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
func (s *session) execRoute(r *router, d *rewrite.Decision) *upstream.Upstream {
	var u, other *upstream.Upstream
	pick := func(k *upstream.Upstream) {
		switch {
		case u == nil:
			u = k
		case k != u && other == nil:
			other = k
		}
	}
	s.tx.eachQueue(func(q []byte) { pick(r.forQueue(q)) })
	if s.tx.defKeyed {
		pick(r.def)
	}
	if other != nil {
		s.crossRoute(d, "the transaction's queued commands now route to upstreams "+u.Name()+" and "+other.Name()+
			"; emqproxy does not split a transaction across upstreams")
		return nil
	}
	switch {
	case s.pinned != nil && s.pinnedUp != nil:
		if u != nil && u != s.pinnedUp {
			s.crossRoute(d, "the transaction's queued commands route to upstream "+u.Name()+
				" but WATCH pinned the connection to "+s.pinnedUp.Name()+"; emqproxy does not split a WATCH ... EXEC across upstreams")
			return nil
		}
		u = s.pinnedUp
	case s.sub != nil && s.sub.watchUp != nil:
		if u != nil && u != s.sub.watchUp {
			s.crossRoute(d, "the transaction's queued commands route to upstream "+u.Name()+
				" but WATCH pinned the connection to "+s.sub.watchUp.Name()+"; emqproxy does not split a WATCH ... EXEC across upstreams")
			return nil
		}
		u = s.sub.watchUp
	case u == nil:
		u = r.def
	}
	if s.tx.verbs > 0 && u.Role() != s.tx.verbRole {
		s.refuseWith(d, "TRYAGAIN the transaction's queue moved to upstream "+u.Name()+
			" since its script calls were queued; run the transaction again", ReasonHeld)
		return nil
	}
	return u
}

// bound returns the upstream the session is bound to, and why: the WATCH
// pin's (a bridged client's WATCH leg's: legs.go), or, inside MULTI, the
// transaction's.
func (s *session) bound() (*upstream.Upstream, string) {
	switch {
	case s.pinned != nil && s.pinnedUp != nil:
		return s.pinnedUp, "WATCH pinned the connection to"
	case s.sub != nil && s.sub.watchUp != nil:
		return s.sub.watchUp, "WATCH pinned the connection to"
	case s.st.InMulti && s.tx.up != nil:
		return s.tx.up, "the transaction's earlier commands route to"
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
func (s *session) crossRoute(d *rewrite.Decision, text string) {
	s.refuseWith(d, "CROSSROUTE "+text, ReasonCrossRoute)
}

// keysRoute routes a command by its keys (the plan's): u is the upstream
// of the first key, first (nil when it has none: the default route); other
// is a second upstream some other key routes to, if any.
func keysRoute(r *router, keys [][]byte) (u *upstream.Upstream, first []byte, other *upstream.Upstream) {
	for _, key := range keys {
		k := r.def
		if q := rewrite.Hashtag(key); q != nil {
			k = r.forQueue(q)
		}
		switch {
		case u == nil:
			u, first = k, key
		case k != u && other == nil:
			other = k
		}
	}
	if u == nil {
		return r.def, nil, nil
	}
	return u, first, other
}

// getkeys asks the default upstream for a command's keys (COMMAND GETKEYS),
// in a round trip of its own: for the few commands whose key positions the
// server's specs leave open. Any failure means no keys (the default route).
func (s *session) getkeys(r *router, args [][]byte) [][]byte {
	p := r.def.Shared(s.id, 2) // the keys are decoded from a RESP2 array
	if p == nil {
		return nil
	}
	b := upstream.NewBatch()
	b.Out = redcon.AppendArray(b.Out, len(args)+2)
	b.Out = redcon.AppendBulkString(b.Out, "COMMAND")
	b.Out = redcon.AppendBulkString(b.Out, "GETKEYS")
	for _, a := range args {
		b.Out = redcon.AppendBulk(b.Out, a)
	}
	b.N, b.Max = 1, 1<<20
	if err := p.Send(b); err != nil {
		return nil
	}
	p.Await(b)
	rep, _, err := resp.Decode(b.Reply(0))
	if err != nil || rep.Type != '*' {
		return nil
	}
	keys := make([][]byte, len(rep.Elems))
	for i, e := range rep.Elems {
		keys[i] = []byte(e.Str)
	}
	return keys
}

// alsoLoad adds the SCRIPT LOAD fan-out of a planned command to the
// current segment: a body the proxy answers itself (a verb's) also goes to
// every scripts upstream, a forwarded one to every other upstream, their
// replies dropped (one queued in MULTI goes to the others once EXEC's
// reply shows the server ran it: transaction.go's execLoad). routed is the
// upstream the command itself went to, shared whether it went on a shared
// connection (a WATCH pin does not share its segment).
func (s *session) alsoLoad(f resp.Frame, d *rewrite.Decision, routed *upstream.Upstream, shared bool) {
	if !isScriptLoad(f.Args) {
		return
	}
	switch {
	case d.Action == rewrite.Local && d.Script != nil:
		s.loadOnScripts(f) // a verb body: scripts nodes still run it
	case (d.Action == rewrite.Pass || d.Action == rewrite.Rewrite) && shared:
		s.loadEverywhere(f, routed)
	}
}

// loadEverywhere also sends a forwarded SCRIPT LOAD (of a read body, or an
// unknown one under the readonly policy) to every other upstream's shared
// connection, in the same segment, so a later EVALSHA of it finds the
// script wherever it is routed. The client gets the routed upstream's
// reply; the others' are dropped (an upstream that is down is skipped: a
// call routed there fails anyway, and a NOSCRIPT later makes the client
// load again).
func (s *session) loadEverywhere(f resp.Frame, routed *upstream.Upstream) {
	s.alsoSend(f, func(u *upstream.Upstream) bool { return u != routed })
}

// isScriptLoad reports whether args is SCRIPT LOAD <body>.
func isScriptLoad(args [][]byte) bool {
	return len(args) == 3 && foldEq(args[0], "SCRIPT") && foldEq(args[1], "LOAD")
}

// isScriptCall reports whether name is EVAL, EVALSHA, EVAL_RO or EVALSHA_RO.
func isScriptCall(name []byte) bool {
	return foldEq(name, "EVALSHA") || foldEq(name, "EVAL") || foldEq(name, "EVALSHA_RO") || foldEq(name, "EVAL_RO")
}

// foldEq reports whether b equals the upper-case ASCII s, ignoring case.
func foldEq(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// cmdName is the command's name in upper case for an error text (cut to 32
// bytes, printable only).
func cmdName(args [][]byte) string {
	if len(args) == 0 {
		return ""
	}
	n := args[0]
	if len(n) > 32 {
		n = n[:32]
	}
	out := make([]byte, 0, len(n))
	for _, c := range n {
		switch {
		case 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case c < ' ' || c > '~' || c == '\'':
			c = '?'
		}
		out = append(out, c)
	}
	return string(out)
}

// loadOnScripts sends SCRIPT LOAD of a verb body, which the proxy answers
// itself, to every scripts upstream's shared connection (their replies are
// dropped): a verb call routed to a scripts node leaves as the client's
// EVALSHA, and a client that loads after NOSCRIPT must find it there. No
// module upstream ever gets a verb body.
func (s *session) loadOnScripts(f resp.Frame) {
	s.alsoSend(f, func(u *upstream.Upstream) bool { return u.Role() == RoleScripts })
}

// alsoSend adds f, as the client sent it, to the current segment's part
// for the shared RESP2 connection (always open, unlike the RESP3 ones) of
// every upstream to that wants it. No reply slot is added: those replies
// are read and dropped. An upstream that is down is skipped.
func (s *session) alsoSend(f resp.Frame, to func(*upstream.Upstream) bool) {
	for _, u := range s.srv.ups {
		if !to(u) {
			continue
		}
		p := u.Shared(s.id, 2)
		if p == nil {
			continue
		}
		b := s.parts[s.partFor(u, p, false, false)].b
		b.Out = append(b.Out, f.Raw...)
		b.N++
		s.simple = false
	}
}
