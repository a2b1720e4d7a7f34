package observe

import (
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// The audit log: one JSON record per rewrite and per refusal (and per
// passed command when Config.AuditPassthrough is set), written on its own
// logger after the client's replies are written. Never a payload, a value
// or a password: only the fields below.
//
// Every record:
//
//	msg         "rewrite" | "refuse" | "pass"
//	conn        the client connection id
//	client      the client's address
//	user        the authenticated user ("" before AUTH or without auth)
//	reply       the reply kind the client got: simple, bulk, null, integer,
//	            array, null_array, other, or an error's code (its first
//	            word, e.g. ERR, NOSCRIPT, EMQWIRE, UPSTREAM)
//	latency_us  from the batch framed to its replies written
//	map         the pinned map's digest
//
// rewrite and pass records add, when the command names a script:
//
//	script, sha, token (rewrite only), numkeys, queue, upstream
//
// refuse records add:
//
//	reason      why (rewrite.Reason: noauth, denied, unknown_script, shape, ...)
//	sha         the script's sha, when the refusal concerns a script
//	command     otherwise the command name as sent
type record struct {
	action   rewrite.Action
	reason   rewrite.Reason
	script   *shamap.Script
	sha      string
	cmd      []byte // args[0]; valid until the session reads again
	queue    []byte // valid until the session reads again
	numkeys  int64  // -1 when not a script call
	reply    string
	upstream string
}

// ReplyKind names a reply for the audit log: simple, bulk, null, integer,
// array, null_array, other, or an error's code.
func ReplyKind(r []byte) string {
	if len(r) < 3 {
		return "other"
	}
	switch r[0] {
	case '+':
		return "simple"
	case ':':
		return "integer"
	case '$':
		if r[1] == '-' {
			return "null"
		}
		return "bulk"
	case '*':
		if r[1] == '-' {
			return "null_array"
		}
		return "array"
	case '-':
		end := 1
		for end < len(r) && r[end] != ' ' && r[end] != '\r' {
			end++
		}
		return string(r[1:end])
	}
	return "other"
}

// WriteAudits writes the round's records, after its replies were written
// to the client: user is the session's user ("" before AUTH), digest the
// pinned map's, began when the batch was framed (latency_us is from it).
//
// Each record is one Write on the core of a cached child logger (below),
// with the level checked once per batch and one timestamp for the batch:
// zap's Logger.Check would take a timestamp and a pooled CheckedEntry per
// record, about a third of the cost of encoding one. Nothing samples or
// filters the records (the audit log must not drop any); a write the sink
// refuses is reported on the session's log, once per batch.
func (o *Session) WriteAudits(user, digest string, began time.Time) {
	if len(o.records) == 0 {
		return
	}
	defer func() {
		clear(o.records)
		o.records = o.records[:0]
	}()
	core := o.audLog.core(&o.cfg, user, digest)
	if !core.Enabled(zapcore.InfoLevel) {
		return
	}
	now := time.Now()
	lat := now.Sub(began).Microseconds()
	var werr error
	for i := range o.records {
		r := &o.records[i]
		c := core
		if r.script != nil && r.action != rewrite.Refuse {
			c = o.audLog.script(r) // script, token, sha and upstream pre-encoded
		}
		f := o.fields[:0]
		switch {
		case r.action == rewrite.Refuse:
			f = append(f, zap.String("reason", string(r.reason)))
			if r.sha != "" {
				f = append(f, zap.String("sha", r.sha))
			} else {
				f = append(f, zap.String("command", transient(r.cmd)))
			}
		case r.script != nil:
			f = append(f, zap.Int64("numkeys", r.numkeys), zap.String("queue", transient(r.queue)))
		case r.sha != "":
			f = append(f, zap.String("sha", r.sha), zap.Int64("numkeys", r.numkeys),
				zap.String("queue", transient(r.queue)), zap.String("upstream", r.upstream))
		default:
			f = append(f, zap.String("command", transient(r.cmd)), zap.String("upstream", r.upstream))
		}
		f = append(f, zap.String("reply", r.reply), zap.Int64("latency_us", lat))
		ent := zapcore.Entry{Level: zapcore.InfoLevel, Time: now, LoggerName: o.audLog.name, Message: r.action.String()}
		if err := c.Write(ent, f); err != nil {
			werr = err
		}
		o.fields = f[:0]
	}
	if werr != nil {
		o.cfg.Log.Warn("audit records not written", zap.Error(werr))
	}
}

// transient views b as a string without copying it (zap.ByteString boxes
// the slice: an allocation per record). Only for a field encoded before b
// changes: the records are written before the session reads again.
func transient(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// sessionAudit caches a child of the audit logger that carries the fields
// fixed for a session (conn, client, user, map). zap encodes a child's
// fields once, when it is made, so each record encodes only its own
// fields: the map digest alone is 64 bytes of JSON a record need not
// re-encode. The child is remade when the user or the map changes.
//
// Records of script calls go on a grandchild that also carries the
// script's fixed fields (script, token, sha, upstream: 80-odd bytes to
// escape per record), one per script, action, sha and upstream the session
// has used, made on first use and dropped with the child.
type sessionAudit struct {
	log     *zap.Logger
	name    string // the audit logger's name, for the records' entries
	user    string
	digest  string
	scripts []scriptAudit
}

// scriptAudit is a child logger's core with one script's fixed fields.
type scriptAudit struct {
	script   *shamap.Script
	rewrite  bool
	sha      string
	upstream string
	core     zapcore.Core
}

// maxScriptLoggers bounds the script children a session keeps.
const maxScriptLoggers = 32

// core returns the core of the session's child logger, remaking the child
// when the user or the map changed.
func (a *sessionAudit) core(c *Config, user, digest string) zapcore.Core {
	if a.log == nil || a.user != user || a.digest != digest {
		a.user, a.digest, a.name = user, digest, c.Audit.Name()
		a.log = c.Audit.With(zap.Uint64("conn", c.Conn), zap.String("client", c.Addr),
			zap.String("user", user), zap.String("map", digest))
		clear(a.scripts)
		a.scripts = a.scripts[:0]
	}
	return a.log.Core()
}

// script returns the core of the child logger for r's script fields
// (r.script set), after core was called for the batch.
func (a *sessionAudit) script(r *record) zapcore.Core {
	rw := r.action == rewrite.Rewrite && r.script.Verb != ""
	for i := range a.scripts {
		sc := &a.scripts[i]
		if sc.script == r.script && sc.rewrite == rw && sc.sha == r.sha && sc.upstream == r.upstream {
			return sc.core
		}
	}
	f := make([]zap.Field, 0, 4)
	f = append(f, zap.String("script", r.script.Name))
	if rw {
		f = append(f, zap.String("token", r.script.Verb))
	}
	f = append(f, zap.String("sha", r.sha), zap.String("upstream", r.upstream))
	if len(a.scripts) == maxScriptLoggers {
		clear(a.scripts)
		a.scripts = a.scripts[:0]
	}
	sc := scriptAudit{script: r.script, rewrite: rw, sha: r.sha, upstream: r.upstream, core: a.log.With(f...).Core()}
	a.scripts = append(a.scripts, sc)
	return sc.core
}
