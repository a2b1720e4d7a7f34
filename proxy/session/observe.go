package session

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The session's side of package observe (the audit log and the capture):
// what it hands over, as values, for every session mode alike (normal
// service and its transactions, WATCH pins, blocking commands and routed
// splits; the RESP3 bridge). The session's observation state is one
// field, s.obs. What a decision asks for besides its own send is not
// observation and is not here: the SCRIPT EXISTS patch (package segment's Emit,
// the relay's tap on the bridge: bridge.go) and the SCRIPT LOAD fan-out
// (scriptload.go's alsoLoad).

// newObserver returns the observation of a new session.
func (s *session) newObserver() observe.Session {
	return observe.NewSession(observe.Config{Conn: s.id, Addr: s.addr, Log: s.log, Audit: s.srv.Audit,
		AuditPassthrough: s.srv.Cfg.AuditPassthrough, Capture: s.srv.Cap, Keys: s.srv.Keys})
}

// observe reports a planned command (metrics, the batch's kind) and
// returns its audit record's index, or -1.
func (s *session) observe(args [][]byte, d *rewrite.Decision) int {
	s.srv.Met.Command(d)
	s.kind = max(s.kind, observe.KindOf(d))
	return s.obs.Command(args, d)
}

// logAudits writes the round's audit records, after its replies were
// written.
func (s *session) logAudits() {
	if !s.obs.Audits() {
		return
	}
	digest := ""
	if s.v.Pol != nil && s.v.Pol.Map != nil {
		digest = s.v.Pol.Map.Digest
	}
	s.obs.WriteAudits(s.st.User, digest, s.began)
}

// captureCommand records the command just forwarded (the session's last
// slot) when a capture wants its queue. ck is the command's entry in the
// server's table, as the plan found it.
func (s *session) captureCommand(f resp.Frame, d *rewrite.Decision, ck *cmdtable.Entry) {
	if len(s.seg.Slots) == 0 || s.seg.Slots[len(s.seg.Slots)-1].Local {
		return
	}
	s.obs.Forwarded(len(s.seg.Slots)-1, f.Args, d, ck, s.began)
}

// captureReplies gives the segment's capture records their replies and
// publishes them. It runs once every reply of the segment is in, before
// emit moves them to the output.
func (s *session) captureReplies() {
	pend := s.obs.Awaiting()
	if len(pend) == 0 {
		return
	}
	now := time.Now()
	for _, p := range pend {
		if p.Slot >= len(s.seg.Slots) {
			continue
		}
		sl := s.seg.Slots[p.Slot]
		if sl.Local || sl.Part >= len(s.seg.Parts) || !s.seg.Parts[sl.Part].Sent {
			continue // never sent: nothing reached the upstream
		}
		b := s.seg.Parts[sl.Part].B
		if sl.Idx >= len(b.Ends) {
			continue // no reply (the client is closed over the reply cap)
		}
		s.obs.Finish(p, b.Reply(sl.Idx), now)
	}
	s.obs.Publish()
}
