package proxy

import (
	"time"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// The observer.
//
// What a planned command is reported as, and what its decision asks for
// besides its own send, is done here, for every session mode alike (normal
// service and its transactions, WATCH pins, blocking commands and routed
// splits; the RESP3 bridge):
//
//   - the metrics of decisions (actions, refusals by reason) and the
//     batch's kind for the latency histogram;
//   - the audit record (audit.go), its reply kind and upstream noted when
//     the reply is known (relayed on the bridge);
//   - the capture of chosen queues' commands with their replies
//     (capture.go); on the bridge the relay hands the reply over (tap);
//   - the SCRIPT EXISTS patch: verb shas answer 1 (segment.go's emit, the
//     relay's tap on the bridge);
//   - the SCRIPT LOAD fan-out: a body the proxy answers itself (a verb's)
//     also goes to every scripts upstream, a forwarded one to every other
//     upstream (route_session.go), their replies dropped; one queued in
//     MULTI goes to the others once EXEC's reply shows the server ran it
//     (transaction.go's execLoad).

// observe reports a planned command (metrics, the batch's kind) and
// returns its audit record's index, or -1.
func (s *session) observe(args [][]byte, d *rewrite.Decision) int {
	s.srv.met.Command(d)
	s.kind = max(s.kind, kindOf(d))
	return s.auditFor(args, d)
}

// alsoLoad adds the SCRIPT LOAD fan-out of a planned command (see above) to
// the current segment; routed is the upstream the command itself went to,
// shared whether it went on a shared connection (a WATCH pin does not
// share its segment).
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

// newCapture returns the capture record of a forwarded command when a
// capture wants its queue, with its capturer; nil otherwise.
func (s *session) newCapture(f resp.Frame, d *rewrite.Decision) (*capture.Record, *capturer) {
	q, c := s.captureQueue(f, d) // capture.go
	if c == nil {
		return nil, nil
	}
	n := 0
	for _, a := range f.Args {
		n += len(a)
	}
	buf := make([]byte, 0, n)
	args := make([][]byte, len(f.Args))
	for i, a := range f.Args {
		buf = append(buf, a...)
		args[i] = buf[len(buf)-len(a) : len(buf) : len(buf)]
	}
	rec := &capture.Record{Seq: c.seq.Add(1), Time: s.began, Conn: s.id, Queue: string(q), Args: args}
	if d.Script != nil {
		rec.Script, rec.Token = d.Script.Name, d.Script.Verb
		rec.SetPayload(d.Script.Payload())
	} else if c.o.Redact {
		s.captureKeys(rec)
	}
	return rec, c
}

// tap is what the bridge's relay does with the server's next reply (not a
// push) in place of passing it on as it is: answer reply instead (nil:
// drop it), or, with pass, pass it on patched (SCRIPT EXISTS); a capture
// record gets the server's reply either way.
type tap struct {
	reply []byte
	pass  bool
	patch [][]byte    // SCRIPT EXISTS args (copies)
	m     *shamap.Map // the map the patch answers from
	rec   *capture.Record
	c     *capturer
	keep  *[]byte // gets a copy of the server's reply (an EXEC's: transaction.go)
}

// apply returns what the client gets for the server's reply fr.
func (t *tap) apply(fr []byte) []byte {
	if t.rec != nil {
		t.rec.Reply = append([]byte(nil), fr...)
		t.rec.Latency = time.Since(t.rec.Time)
		t.c.w.AddBatch([]*capture.Record{t.rec})
	}
	if t.keep != nil {
		*t.keep = append([]byte(nil), fr...)
	}
	if !t.pass {
		return t.reply
	}
	if t.patch != nil {
		if p, err := rewrite.PatchScriptExists(fr, t.patch, t.m); err == nil {
			return p
		}
	}
	return fr
}

// bridgeTap is the tap a bridged command's reply needs (see above), or nil:
// its SCRIPT EXISTS patch, its capture record, a SKIP's drop.
func (s *session) bridgeTap(f resp.Frame, d *rewrite.Decision, skipped bool) *tap {
	rec, c := s.newCapture(f, d)
	if rec == nil && !skipped && d.Effect != rewrite.ScriptExists {
		return nil
	}
	t := &tap{pass: !skipped, rec: rec, c: c}
	if d.Effect == rewrite.ScriptExists {
		t.m = s.v.pol.Map
		for _, a := range f.Args {
			t.patch = append(t.patch, append([]byte(nil), a...))
		}
	}
	return t
}
