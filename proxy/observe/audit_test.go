package observe

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// jsonAudit is an audit logger writing JSON lines to buf.
func jsonAudit(buf *bytes.Buffer) *zap.Logger {
	enc := zapcore.EncoderConfig{MessageKey: "msg", NameKey: "logger", LineEnding: "\n"}
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(buf), zapcore.InfoLevel)).Named("audit")
}

// records decodes the JSON lines in buf.
func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, m)
	}
	buf.Reset()
	return out
}

func args(s ...string) [][]byte {
	a := make([][]byte, len(s))
	for i, x := range s {
		a[i] = []byte(x)
	}
	return a
}

func TestReplyKind(t *testing.T) {
	for reply, want := range map[string]string{
		"+OK\r\n": "simple", ":1\r\n": "integer", "$1\r\nx\r\n": "bulk", "$-1\r\n": "null",
		"*0\r\n": "array", "*-1\r\n": "null_array", "-NOSCRIPT No matching script\r\n": "NOSCRIPT",
		"-ERR\r\n": "ERR", "_\r\n": "other", "": "other", "%0\r\n": "other",
	} {
		if got := ReplyKind([]byte(reply)); got != want {
			t.Errorf("ReplyKind(%q) = %q, want %q", reply, got, want)
		}
	}
}

// TestCommandAudits is which decisions get a record.
func TestCommandAudits(t *testing.T) {
	verb := &shamap.Script{Name: "enqueue", Verb: "ENQUEUE"}
	read := &shamap.Script{Name: "peek", Read: true}
	for _, tc := range []struct {
		name        string
		d           rewrite.Decision
		passthrough bool
		nilAudit    bool
		want        bool
	}{
		{name: "rewrite", d: rewrite.Decision{Action: rewrite.Rewrite, Script: verb}, want: true},
		{name: "refuse", d: rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonDenied}, want: true},
		{name: "pass", d: rewrite.Decision{Action: rewrite.Pass}},
		{name: "pass audited", d: rewrite.Decision{Action: rewrite.Pass}, passthrough: true, want: true},
		{name: "verb passed", d: rewrite.Decision{Action: rewrite.Pass, Script: verb}, want: true},
		{name: "read script passed", d: rewrite.Decision{Action: rewrite.Pass, Script: read}},
		{name: "local", d: rewrite.Decision{Action: rewrite.Local}, passthrough: true},
		{name: "no audit log", d: rewrite.Decision{Action: rewrite.Refuse}, nilAudit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := Config{Log: zap.NewNop(), Audit: jsonAudit(&buf), AuditPassthrough: tc.passthrough}
			if tc.nilAudit {
				c.Audit = nil
			}
			o := NewSession(c)
			i := o.Command(args("GET", "k"), &tc.d)
			if got := i >= 0; got != tc.want || o.Audits() != tc.want {
				t.Fatalf("Command = %d, Audits() = %v; want a record: %v", i, o.Audits(), tc.want)
			}
		})
	}
}

// TestWriteAudits is each kind of record's fields.
func TestWriteAudits(t *testing.T) {
	var buf bytes.Buffer
	o := NewSession(Config{Conn: 7, Addr: "10.0.0.1:5000", Log: zap.NewNop(), Audit: jsonAudit(&buf), AuditPassthrough: true})
	enq := &shamap.Script{Name: "enqueue", SHA: "e", Verb: "ENQUEUE"}
	sha := strings.Repeat("a", 40)
	keys := args("emq:{q}:job:1", "emq:{q}:pending")

	i := o.Command(args("EVALSHA", sha, "2"), &rewrite.Decision{Action: rewrite.Rewrite, Script: enq, SHA: sha, Queue: []byte("q"), Keys: keys})
	o.Reply(i, []byte("*0\r\n"), "node")
	i = o.Command(args("EVALSHA", sha), &rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonUnknownScript, SHA: sha})
	o.Reply(i, []byte("-NOSCRIPT x\r\n"), "")
	i = o.Command(args("FLUSHALL"), &rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonDenied})
	o.Reply(i, []byte("-ERR x\r\n"), "")
	i = o.Command(args("EVALSHA", sha, "2"), &rewrite.Decision{Action: rewrite.Pass, SHA: sha, Queue: []byte("q"), Keys: keys})
	o.Reply(i, []byte(":1\r\n"), "node")
	i = o.Command(args("GET", "k"), &rewrite.Decision{Action: rewrite.Pass})
	o.Relayed(i, "other")
	o.WriteAudits("alice", "d1", time.Now().Add(-time.Millisecond))
	if o.Audits() {
		t.Fatal("records left after WriteAudits")
	}

	got := records(t, &buf)
	want := []map[string]any{
		{"msg": "rewrite", "script": "enqueue", "token": "ENQUEUE", "sha": sha, "upstream": "node", "numkeys": 2.0, "queue": "q", "reply": "array"},
		{"msg": "refuse", "reason": "unknown_script", "sha": sha, "reply": "NOSCRIPT"},
		{"msg": "refuse", "reason": "denied", "command": "FLUSHALL", "reply": "ERR"},
		{"msg": "pass", "sha": sha, "numkeys": 2.0, "queue": "q", "upstream": "node", "reply": "integer"},
		{"msg": "pass", "command": "GET", "upstream": "other", "reply": "relayed"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(got), len(want), got)
	}
	for n, w := range want {
		g := got[n]
		w["logger"], w["conn"], w["client"], w["user"], w["map"] = "audit", 7.0, "10.0.0.1:5000", "alice", "d1"
		lat, ok := g["latency_us"].(float64)
		if !ok || lat < 1000 {
			t.Errorf("record %d: latency_us %v, want at least 1000", n, g["latency_us"])
		}
		delete(g, "latency_us")
		if len(g) != len(w) {
			t.Errorf("record %d: %v, want %v", n, g, w)
			continue
		}
		for k, v := range w {
			if g[k] != v {
				t.Errorf("record %d: %s = %v, want %v", n, k, g[k], v)
			}
		}
	}

	// A new user: the fixed fields follow.
	o.Command(args("FLUSHALL"), &rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonNoAuth})
	o.WriteAudits("bob", "d2", time.Now())
	if got := records(t, &buf); len(got) != 1 || got[0]["user"] != "bob" || got[0]["map"] != "d2" || got[0]["reply"] != "" {
		t.Errorf("after a change of user and map: %v", got)
	}
}

// TestWriteAuditsSinkError is a sink's refusal, reported once per batch on
// the session's log.
func TestWriteAuditsSinkError(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{MessageKey: "msg"})
	audit := zap.New(zapcore.NewCore(enc, zapcore.AddSync(failing{}), zapcore.InfoLevel))
	o := NewSession(Config{Log: zap.New(core), Audit: audit})
	for range 3 {
		o.Command(args("FLUSHALL"), &rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonDenied})
	}
	o.WriteAudits("", "", time.Now())
	if n := logs.FilterMessage("audit records not written").Len(); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestCommandAllocs: noting a command, its reply and writing the records
// allocate nothing once the session's slices and child loggers are made.
func TestCommandAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	var buf bytes.Buffer
	o := NewSession(Config{Log: zap.NewNop(), Audit: jsonAudit(&buf)})
	enq := &shamap.Script{Name: "enqueue", SHA: "e", Verb: "ENQUEUE"}
	a := args("EVALSHA", "e", "1", "emq:{q}:job:1")
	d := rewrite.Decision{Action: rewrite.Rewrite, Script: enq, SHA: "e", Queue: []byte("q"), Keys: a[3:]}
	began := time.Now()
	round := func() {
		for range 16 {
			i := o.Command(a, &d)
			o.Reply(i, []byte("*0\r\n"), "node")
		}
		o.WriteAudits("", "d", began)
		buf.Reset()
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Errorf("%v allocations per round of 16 records, want 0", n)
	}
}
