package session

import (
	"github.com/emqproxy/emqproxy/proxy/txn"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// alsoLoad adds the SCRIPT LOAD fan-out of a planned command to the
// current segment: a body the proxy answers itself (a verb's) also goes to
// every scripts upstream, a forwarded one to every other upstream, their
// replies dropped (one queued in MULTI goes to the others once EXEC's
// reply shows the server ran it: transaction.go's execLoad). routed is the
// upstream the command itself went to, shared whether it went on a shared
// connection (a WATCH pin does not share its segment).
func (s *session) alsoLoad(f resp.Frame, d *rewrite.Decision, routed *upstream.Upstream, shared bool) {
	if !txn.IsScriptLoad(f.Args) {
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

// loadOnScripts sends SCRIPT LOAD of a verb body, which the proxy answers
// itself, to every scripts upstream's shared connection (their replies are
// dropped): a verb call routed to a scripts node leaves as the client's
// EVALSHA, and a client that loads after NOSCRIPT must find it there. No
// module upstream ever gets a verb body.
func (s *session) loadOnScripts(f resp.Frame) {
	s.alsoSend(f, func(u *upstream.Upstream) bool { return u.Role() == upstream.RoleScripts })
}

// alsoSend adds f, as the client sent it, to the current segment's part
// for the shared RESP2 connection (always open, unlike the RESP3 ones) of
// every upstream to that wants it. No reply slot is added: those replies
// are read and dropped. An upstream that is down is skipped.
func (s *session) alsoSend(f resp.Frame, to func(*upstream.Upstream) bool) {
	for _, u := range s.srv.Ups {
		if !to(u) {
			continue
		}
		p := s.pipeOf(u, upstream.KindShared, 2, nil)
		if p == nil {
			continue
		}
		b := s.seg.Parts[s.partFor(u, p, false, false)].B
		b.Out = append(b.Out, f.Raw...)
		b.N++
		s.seg.Simple = false
	}
}
