package bench

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestPipelinerSameBytes checks the benchmark's client: a pipeline through
// the proxy gets the very reply bytes the server gives directly, so the
// benchmarks below compare like with like.
func TestPipelinerSameBytes(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	px := startProxy(t, n)
	for _, size := range []int{3, 1024} {
		direct, err := newPipeliner(t, n.Addr, 16, size, "bench:same").round(nil)
		if err != nil {
			t.Fatalf("direct: %v", err)
		}
		proxied, err := newPipeliner(t, px, 16, size, "bench:same").round(nil)
		if err != nil {
			t.Fatalf("proxied: %v", err)
		}
		if !bytes.Equal(direct, proxied) {
			t.Fatalf("size %d: replies differ:\ndirect  %q\nproxied %q", size, direct, proxied)
		}
		if want := bytes.Count(direct, []byte("+OK\r\n")); want != 8 {
			t.Fatalf("size %d: %d OK replies, want 8", size, want)
		}
	}
}

// BenchmarkPassthrough runs pipelines of SET/GET from 50 connections,
// directly to a module node and through an in-process proxy in front of
// it. ns/op is per pipeline; cmds/s is the throughput.
//
//	go test ./bench -run '^$' -bench Passthrough -benchtime 3s -cpuprofile cpu.prof
func BenchmarkPassthrough(b *testing.B) {
	n := node.StartT(b, node.Options{Role: node.Module})
	px := startProxy(b, n)
	for _, path := range []struct{ name, addr string }{{"direct", n.Addr}, {"proxy", px}} {
		for _, shape := range []struct{ depth, size int }{{1, 3}, {16, 3}, {16, 1024}} {
			name := fmt.Sprintf("%s/P%d/%dB", path.name, shape.depth, shape.size)
			b.Run(name, func(b *testing.B) { runClients(b, path.addr, 50, shape.depth, shape.size) })
		}
	}
}

// runClients spreads b.N pipelines over clients connections.
func runClients(b *testing.B, addr string, clients, depth, size int) {
	ps := make([]*pipeliner, clients)
	for i := range ps {
		ps[i] = newPipeliner(b, addr, depth, size, fmt.Sprintf("bench:%d", i))
	}
	work := make(chan struct{}, clients)
	var wg sync.WaitGroup
	var once sync.Once
	b.ResetTimer()
	start := time.Now()
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for range work {
				var err error
				if buf, err = p.round(buf[:0]); err != nil {
					once.Do(func() { b.Errorf("pipeline: %v", err) })
					return
				}
			}
		}()
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N*depth)/elapsed.Seconds(), "cmds/s")
}
