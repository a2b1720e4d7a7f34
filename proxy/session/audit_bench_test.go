package session

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// testPolicy is the stand's map, as the proxy's tests load it.
func testPolicy(t testing.TB) *rewrite.Policy {
	t.Helper()
	m, err := shamap.Load(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		t.Fatalf("load map: %v", err)
	}
	return &rewrite.Policy{Map: m}
}

// BenchmarkAuditRecords writes the audit records of one batch of 16
// rewritten script calls (a client pipelining 16 enqueues) as JSON to a
// buffered sink, as the binary's file sink does; it reports ns per record.
func BenchmarkAuditRecords(b *testing.B) {
	pol := testPolicy(b)
	enc := zapcore.EncoderConfig{TimeKey: "ts", MessageKey: "msg", EncodeTime: zapcore.RFC3339NanoTimeEncoder,
		EncodeDuration: zapcore.MillisDurationEncoder, LineEnding: zapcore.DefaultLineEnding}
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(io.Discard)}
	defer func() { _ = ws.Stop() }()
	audit := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), ws, zapcore.InfoLevel))
	met, err := NewMetrics(nil)
	if err != nil {
		b.Fatal(err)
	}
	var routes atomic.Pointer[plan.Router]
	var policy atomic.Pointer[rewrite.Policy]
	policy.Store(pol)
	srv := &Shared{Log: zap.NewNop(), Audit: audit, Met: met, Mem: limits.NewBudget(1 << 20), Fails: &limits.AuthTable{},
		Keys: &cmdtable.Store{}, Cap: &observe.Capture{}, Redir: &pubsub.Redirects{}, Routes: &routes, Policy: &policy,
		Ctx: context.Background(), Closing: &atomic.Bool{}}
	nc, peer := net.Pipe()
	defer func() { _ = nc.Close(); _ = peer.Close() }()
	s := newSession(srv, 1, nc)
	s.v.Pol = pol
	enq, _ := pol.Map.ByName("enqueue")
	var args [][]byte
	for _, a := range []string{"EVALSHA", enq.SHA, "2", "emq:{bq}:job:J1", "emq:{bq}:pending", "J1", "payload"} {
		args = append(args, []byte(a))
	}
	d := rewrite.Decide(args, &s.st, pol)
	if d.Action != rewrite.Rewrite {
		b.Fatalf("enqueue decided %v, want a rewrite", d.Action)
	}
	const batch = 16
	b.ReportAllocs()
	for b.Loop() {
		for range batch {
			i := s.obs.Command(args, &d)
			s.obs.Reply(i, []byte("*0\r\n"), "node")
		}
		s.logAudits()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
}
