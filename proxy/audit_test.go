package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/stand/node"
)

// syncBuffer is a goroutine-safe sink for the audit log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Sync() error { return nil }

func (s *syncBuffer) records(t *testing.T) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func jsonAudit(sink *syncBuffer) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, sink, zapcore.InfoLevel))
}

// startAudited is startProxy with the audit log on sink, given to New (a
// session takes the server's audit logger when its client connects).
func startAudited(t *testing.T, n *node.Node, sink *syncBuffer) *harness {
	t.Helper()
	return startProxyLogged(t, n, nil, zap.NewNop(), jsonAudit(sink))
}

func TestAuditRecordsRewritesAndRefusals(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	sink := &syncBuffer{}
	h := startAudited(t, n, sink)
	enq, _ := h.srv.Policy().Map.ByName("enqueue")
	c := h.dial()
	c.do("AUTH", "whatever").hasPrefix("-ERR ") // no auth configured: refused, the password never logged
	c.do("EVALSHA", enq.SHA, "2", "emq:{aq}:job:J1", "emq:{aq}:pending", "J1", "secret-payload").is(":1\r\n")
	c.do("EVALSHA", enq.SHA, "1", "emq:{aq}:job:J1").hasPrefix("-EMQWIRE ")
	c.do("FLUSHALL").hasPrefix("-DENIED ")
	c.do("SET", "plain", "value").is("+OK\r\n")
	_ = c.nc.Close()

	var recs []map[string]any
	poll(t, "audit records", func() bool {
		recs = sink.records(t)
		return len(recs) >= 4
	})
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4 (auth refusal, rewrite, shape refusal, denied): %v", len(recs), recs)
	}
	if recs[0]["msg"] != "refuse" || recs[0]["reason"] != "wrongpass" || recs[0]["command"] != "AUTH" {
		t.Errorf("auth refusal record %v", recs[0])
	}
	recs = recs[1:]
	rw := recs[0]
	want := map[string]any{"msg": "rewrite", "script": "enqueue", "sha": enq.SHA, "token": "ENQUEUE",
		"numkeys": float64(2), "queue": "aq", "upstream": "node", "reply": "integer", "map": h.srv.Policy().Map.Digest}
	for k, v := range want {
		if rw[k] != v {
			t.Errorf("rewrite record %s = %v, want %v", k, rw[k], v)
		}
	}
	for _, k := range []string{"conn", "client", "user", "latency_us"} {
		if _, ok := rw[k]; !ok {
			t.Errorf("rewrite record lacks %s", k)
		}
	}
	if recs[1]["msg"] != "refuse" || recs[1]["reason"] != "shape" || recs[1]["sha"] != enq.SHA || recs[1]["reply"] != "EMQWIRE" {
		t.Errorf("shape refusal record %v", recs[1])
	}
	if recs[2]["msg"] != "refuse" || recs[2]["reason"] != "denied" || recs[2]["command"] != "FLUSHALL" {
		t.Errorf("denied record %v", recs[2])
	}
	all := sink.b.String()
	for _, secret := range []string{"secret-payload", "whatever", "value"} {
		if strings.Contains(all, secret) {
			t.Errorf("audit log contains %q", secret)
		}
	}
}

// refusingSink refuses every write, as a full disk does.
type refusingSink struct{}

func (refusingSink) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }
func (refusingSink) Sync() error               { return nil }

// TestAuditSinkRefusalIsReported: a record the sink refuses is reported on
// the operational log, and the client still gets its reply.
func TestAuditSinkRefusalIsReported(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	obs, logs := observer.New(zapcore.WarnLevel)
	refusing := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), refusingSink{}, zapcore.InfoLevel))
	h := startProxyLogged(t, n, nil, zap.New(obs), refusing)
	c := h.dial()
	c.do("FLUSHALL").hasPrefix("-DENIED ")
	c.do("PING").is("+PONG\r\n")
	poll(t, "the refused audit write reported", func() bool {
		return logs.FilterMessage("audit records not written").Len() > 0
	})
	e := logs.FilterMessage("audit records not written").All()[0]
	if got := e.ContextMap()["error"]; got != "no space left on device" {
		t.Errorf("reported error %v", got)
	}
}

// TestAuditPipelinedRewritesNoteEachReply: a pipeline of audited rewrites
// and passes in one write, answered from one batch (its replies become the
// client's output as they are), still gets one record per audited command
// with the kind of its own reply, in order, and the client gets the
// replies the node sent.
func TestAuditPipelinedRewritesNoteEachReply(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	sink := &syncBuffer{}
	h := startAudited(t, n, sink)
	m := h.srv.Policy().Map
	enq, _ := m.ByName("enqueue")
	claim, _ := m.ByName("claim2")
	peek, _ := m.ByName("peek")
	c := h.dial()
	c.send(
		cmd("EVALSHA", enq.SHA, "2", "emq:{pq}:job:J1", "emq:{pq}:pending", "J1", "p1"),
		cmd("SET", "plain", "value"),
		cmd("EVALSHA", claim.SHA, "2", "emq:{pq}:pending", "emq:{pq}:active", "60000"),
		cmd("GET", "plain"),
		cmd("EVALSHA", peek.SHA, "1", "emq:{pq}:job:J9"),
	)
	got := make([]string, 5)
	for i := range got {
		got[i] = string(c.read().got)
	}
	if got[0] != ":1\r\n" || got[1] != "+OK\r\n" || got[2][0] != '*' || got[3] != "$5\r\nvalue\r\n" || got[4][0] == '*' {
		t.Fatalf("replies %q: want enqueued, OK, the job, the value, no job peeked", got)
	}
	var recs []map[string]any
	poll(t, "audit records", func() bool {
		recs = sink.records(t)
		return len(recs) >= 3
	})
	if len(recs) != 3 {
		t.Fatalf("%d records, want the 3 rewrites: %v", len(recs), recs)
	}
	for i, at := range []int{0, 2, 4} {
		r, want, keys := recs[i], observe.ReplyKind([]byte(got[at])), float64(2-i/2)
		if r["msg"] != "rewrite" || r["reply"] != want || r["numkeys"] != keys || r["queue"] != "pq" {
			t.Errorf("record %d: %v, want a rewrite of queue pq with %v keys and reply %s", i, r, keys, want)
		}
	}
	if k := [3]any{recs[0]["reply"], recs[1]["reply"], recs[2]["reply"]}; k[0] == k[1] || k[1] == k[2] || k[0] == k[2] {
		t.Errorf("three different replies noted as %v", k)
	}
}
