package observe

import (
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Config is what a Session is given once, when its client connects.
type Config struct {
	Conn uint64      // the client connection id
	Addr string      // the client's address
	Log  *zap.Logger // the session's log: a write the audit sink refuses is reported there
	// Audit is the audit logger; nil: nothing is audited. Records are
	// written on its core directly (see WriteAudits).
	Audit *zap.Logger
	// AuditPassthrough also audits commands that pass unchanged.
	AuditPassthrough bool
	// Capture is the server's capture; Keys the servers' command tables,
	// where a redacted record finds a plain command's keys.
	Capture *Capture
	Keys    *cmdtable.Store
}

// Session is one client session's observation: the audit records of its
// current round and its side of a running capture. Only the session's
// goroutine uses it.
type Session struct {
	cfg Config

	// The round's audit records, written after its replies (audit.go).
	records []record
	fields  []zap.Field  // reused for the records' fields
	audLog  sessionAudit // the audit logger with this session's fixed fields

	cs capState // its side of the running capture (capture.go)
}

// NewSession returns the observation of a new client session.
func NewSession(c Config) Session {
	return Session{cfg: c}
}

// Command notes a planned command and returns the index of its audit
// record, or -1 when its decision is not audited. args[0] and d.Queue are
// read when the records are written (WriteAudits), before the session
// reads again.
func (o *Session) Command(args [][]byte, d *rewrite.Decision) int {
	switch d.Action {
	case rewrite.Rewrite, rewrite.Refuse:
	case rewrite.Pass:
		// A verb call that passes went to a scripts upstream (routing):
		// audited like the rewrite it would be on a module upstream.
		verb := d.Script != nil && d.Script.Verb != ""
		if !o.cfg.AuditPassthrough && !verb {
			return -1
		}
	default:
		return -1
	}
	if o.cfg.Audit == nil {
		return -1
	}
	r := record{action: d.Action, reason: d.Reason, script: d.Script, sha: d.SHA, queue: d.Queue, numkeys: -1}
	if len(args) > 0 {
		r.cmd = args[0]
	}
	if d.SHA != "" { // a script call whose numkeys the server accepts
		r.numkeys = int64(len(d.Keys))
	}
	o.records = append(o.records, r)
	return len(o.records) - 1
}

// Audits reports whether the current round has audit records waiting.
func (o *Session) Audits() bool { return len(o.records) > 0 }

// Reply notes the reply the command of audit record i (Command's index,
// -1 for none) got, and the name of the upstream it came from ("" for a
// reply the proxy made).
func (o *Session) Reply(i int, reply []byte, upstream string) {
	if i < 0 {
		return
	}
	r := &o.records[i]
	r.reply = ReplyKind(reply)
	if upstream != "" {
		r.upstream = upstream
	}
}

// Relayed notes that the command of audit record i (-1 for none) was
// answered by upstream on a bridged connection, whose relay passes the
// server's replies on unframed: its reply kind is "relayed".
func (o *Session) Relayed(i int, upstream string) {
	if i < 0 {
		return
	}
	o.records[i].reply, o.records[i].upstream = replyRelayed, upstream
}

// replyRelayed is the reply kind of a command the server answered on a
// bridged connection.
const replyRelayed = "relayed"
