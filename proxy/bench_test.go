package proxy

import (
	"bufio"
	"io"
	"net"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/stand/node"
)

// benchPipelined runs b.N GETs from parallel clients in pipelines of depth
// against addr.
func benchPipelined(b *testing.B, addr string, depth int) {
	var req []byte
	for range depth {
		req = node.AppendCommand(req, "GET", "bench")
	}
	b.SetBytes(int64(len(req) / depth))
	b.RunParallel(func(pb *testing.PB) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer func() { _ = nc.Close() }()
		br := bufio.NewReaderSize(nc, 64*1024)
		for pb.Next() {
			if _, err := nc.Write(req); err != nil {
				b.Error(err)
				return
			}
			for range depth {
				if _, err := node.ReadReply(br); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
}

func benchSetup(b *testing.B) (*node.Node, *harness) {
	n := node.StartT(b, node.Options{Role: node.Bare})
	h := startProxy(b, n, nil)
	if _, err := node.RawDo(n.Addr, "SET", "bench", "0123456789"); err != nil {
		b.Fatal(err)
	}
	return n, h
}

// BenchmarkSessionPassthrough measures GET through the proxy; each op is a
// pipeline of 16 commands from one of GOMAXPROCS*8 clients.
func BenchmarkSessionPassthrough(b *testing.B) {
	_, h := benchSetup(b)
	b.SetParallelism(8)
	b.ResetTimer()
	benchPipelined(b, h.addr, 16)
}

// BenchmarkDirect is BenchmarkSessionPassthrough against the node itself.
func BenchmarkDirect(b *testing.B) {
	n, _ := benchSetup(b)
	b.SetParallelism(8)
	b.ResetTimer()
	benchPipelined(b, n.Addr, 16)
}

// BenchmarkSessionPassthroughP1 is one command per round trip.
func BenchmarkSessionPassthroughP1(b *testing.B) {
	_, h := benchSetup(b)
	b.SetParallelism(8)
	b.ResetTimer()
	benchPipelined(b, h.addr, 1)
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
	srv, err := New(Options{Upstream: UpstreamOptions{Name: "node", Address: "127.0.0.1:1"}, Policy: pol}, zap.NewNop(), audit)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
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
			s.obs.Reply(i, []byte("*0\r\n"), srv.up.Name())
		}
		s.logAudits()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
}
