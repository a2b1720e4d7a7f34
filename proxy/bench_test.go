package proxy

import (
	"bufio"
	"net"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// benchPipelined runs b.N GETs from parallel clients in pipelines of depth
// against addr.
func benchPipelined(b *testing.B, addr string, depth int) {
	var req []byte
	for range depth {
		req = resp.AppendCommand(req, "GET", "bench")
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
				if _, err := resp.ReadReply(br); err != nil {
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
