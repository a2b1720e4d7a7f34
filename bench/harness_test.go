package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// startProxy serves proxy.New in front of n on a loopback port and returns
// its address once it is ready (connected to n).
func startProxy(tb testing.TB, n *node.Node) string {
	tb.Helper()
	m, err := shamap.Load(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		tb.Fatalf("load map: %v", err)
	}
	srv, err := proxy.New(proxy.Options{
		Upstream: proxy.UpstreamOptions{Name: "module-a", Address: n.Addr},
		Policy:   &rewrite.Policy{Map: m},
	}, zap.NewNop(), nil)
	if err != nil {
		tb.Fatalf("new proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-served; err != nil && !errors.Is(err, proxy.ErrServerClosed) {
			tb.Errorf("serve: %v", err)
		}
	})
	addr := ln.Addr().String()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if srv.Ready() {
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("proxy %s not ready: %v", addr, srv.Readiness())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pipeliner sends pipelines of SET and GET on one raw connection and reads
// their replies back, as redis-benchmark does.
type pipeliner struct {
	nc  net.Conn
	br  *bufio.Reader
	req []byte
	n   int // commands per pipeline
}

// newPipeliner builds a pipeline of depth commands alternating SET k v and
// GET k over a value of size bytes.
func newPipeliner(tb testing.TB, addr string, depth, size int, key string) *pipeliner {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { _ = nc.Close() })
	val := bytes.Repeat([]byte("v"), size)
	var req []byte
	for i := range depth {
		if i%2 == 0 {
			req = fmt.Appendf(req, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(val), val)
		} else {
			req = fmt.Appendf(req, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
		}
	}
	return &pipeliner{nc: nc, br: bufio.NewReaderSize(nc, 64*1024), req: req, n: depth}
}

// round sends one pipeline and returns the reply bytes (appended to dst).
func (p *pipeliner) round(dst []byte) ([]byte, error) {
	_ = p.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.nc.Write(p.req); err != nil {
		return dst, err
	}
	for range p.n {
		line, err := p.br.ReadSlice('\n')
		if err != nil {
			return dst, err
		}
		dst = append(dst, line...)
		if line[0] == '$' && line[1] != '-' {
			var size int
			if _, err := fmt.Sscanf(string(line[1:]), "%d", &size); err != nil {
				return dst, err
			}
			start := len(dst)
			dst = append(dst, make([]byte, size+2)...)
			if _, err := io.ReadFull(p.br, dst[start:]); err != nil {
				return dst, err
			}
		}
	}
	return dst, nil
}
