package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Path names of the two ways a legacy client reaches a job core.
const (
	ScriptsPath = "scripts" // the client talks to a scripts node directly
	ProxyPath   = "proxy"   // the client talks to the proxy in front of a module node
)

// Sentinel errors of the package.
var (
	// ErrStand means a node or the proxy could not be started or read.
	ErrStand = errors.New("e2e: stand")
	// ErrFence means the proxy's upstream fence refused the module node.
	ErrFence = errors.New("e2e: upstream fence")
)

// Path is one way a legacy client reaches a job core: the address the
// client dials, and the node that ends up holding the data.
type Path struct {
	Name   string        // ScriptsPath or ProxyPath
	Addr   string        // where the legacy client connects
	Node   *node.Node    // the node holding the data
	Direct valkey.Client // a client straight to Node: snapshots, TIME, INFO
	Map    *shamap.Map   // the pinned map the client checks its scripts against
	RunID  string        // the module node's run_id ("" on the scripts path)
	Proxy  *proxy.Server // nil on the scripts path

	fences *atomic.Int64 // upstream fences the proxy ran (proxy path)
}

// UpstreamFences returns how many upstream connections passed the proxy's
// fence so far (0 on the scripts path).
func (p *Path) UpstreamFences() int64 {
	if p.fences == nil {
		return 0
	}
	return p.fences.Load()
}

// LoadMap loads the stand's pinned map (stand/map.yaml of the repository).
func LoadMap(t testing.TB) *shamap.Map {
	t.Helper()
	m, err := shamap.Load(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		t.Fatalf("%v: %v", ErrStand, err)
	}
	return m
}

// StartScripts starts a scripts node on srv (branded with the legacy brand,
// cold script cache) and returns the path of a client talking to it
// directly.
func StartScripts(t testing.TB, srv node.Server, m *shamap.Map) *Path {
	t.Helper()
	n := node.StartT(t, node.Options{Role: node.Scripts, Brand: m.LegacyBrand, Server: srv.Path})
	return &Path{Name: ScriptsPath, Addr: n.Addr, Node: n, Direct: n.Client(t), Map: m}
}

// StartProxied starts a module node on srv (branded by EMQ.INSTALL) and a proxy in
// front of it with the pinned map, and returns the path of a client talking
// to the proxy. Every upstream connection the proxy opens passes the
// wire-6 fence (fence.CheckModule, install off) first. Both are stopped at cleanup. defs are
// extra -D flags of the module build (test builds with a broken verb).
func StartProxied(t testing.TB, server node.Server, m *shamap.Map, defs ...string) *Path {
	t.Helper()
	n := node.StartT(t, node.Options{Role: node.Module, ModuleDefs: defs, Server: server.Path})
	p := &Path{Name: ProxyPath, Node: n, Direct: n.Client(t), Map: m, fences: new(atomic.Int64)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if p.RunID, err = RunID(ctx, p.Direct); err != nil {
		t.Fatal(err)
	}
	srv, addr := ServeProxy(t, proxy.Options{
		Upstream: proxy.UpstreamOptions{Name: "module", Address: n.Addr},
		OnConnect: func(ctx context.Context, c fence.Conn) error {
			if _, err := fence.CheckModule(ctx, c, m, false); err != nil {
				return fmt.Errorf("%w: %w", ErrFence, err)
			}
			p.fences.Add(1)
			return nil
		},
		Policy: &rewrite.Policy{Map: m},
	}, nil)
	p.Addr, p.Proxy = addr, srv
	if err := WaitFor(ctx, srv.Ready); err != nil {
		t.Fatalf("%v: proxy never ready: %v (%v)", ErrStand, err, srv.Readiness())
	}
	return p
}

// ServeProxy starts a proxy with opts on a free loopback port (audit, when
// not nil, receives its audit records), shuts it down at cleanup, and
// returns it with the address clients dial. It does not wait for readiness.
// The proxy's own log is kept, and its end printed when the test failed.
func ServeProxy(t testing.TB, opts proxy.Options, audit *zap.Logger) (*proxy.Server, string) {
	t.Helper()
	logs := &tailSink{}
	t.Cleanup(func() { // runs after the shutdown below
		if t.Failed() {
			t.Logf("the proxy's log, its last %d KiB:\n%s", tailKeep>>10, logs.tail())
		}
	})
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), logs, zapcore.InfoLevel))
	srv, err := proxy.New(opts, log, audit)
	if err != nil {
		t.Fatalf("%v: proxy: %v", ErrStand, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%v: listen: %v", ErrStand, err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("proxy shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, proxy.ErrServerClosed) {
			t.Errorf("proxy serve: %v", err)
		}
	})
	return srv, ln.Addr().String()
}

// tailKeep is how much of a proxy's log a failed test prints.
const tailKeep = 64 << 10

// tailSink keeps the end of a log: at most twice tailKeep bytes.
type tailSink struct {
	mu sync.Mutex
	b  []byte
}

func (s *tailSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	if len(s.b) > 2*tailKeep {
		s.b = append(s.b[:0], s.b[len(s.b)-tailKeep:]...)
	}
	return len(p), nil
}

func (s *tailSink) Sync() error { return nil }

// tail returns the last tailKeep bytes written.
func (s *tailSink) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b[max(0, len(s.b)-tailKeep):])
}

// AuditSink is an in-memory audit log the tests read back.
type AuditSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Logger returns a JSON audit logger writing to the sink.
func (s *AuditSink) Logger() *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), s, zapcore.InfoLevel))
}

func (s *AuditSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Sync is a no-op: the sink is memory.
func (s *AuditSink) Sync() error { return nil }

// Records returns every record written so far, decoded.
func (s *AuditSink) Records() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(s.b.String()), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// RunID reads the server's run_id from INFO server.
func RunID(ctx context.Context, c valkey.Client) (string, error) {
	text, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("%w: INFO server: %v", ErrStand, err)
	}
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%w: INFO server has no run_id", ErrStand)
}

// ServerMillis reads the server's time in milliseconds (TIME), the clock
// both executors compute "now" from.
func ServerMillis(ctx context.Context, c valkey.Client) (int64, error) {
	parts, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil || len(parts) != 2 {
		return 0, fmt.Errorf("%w: TIME: %v %v", ErrStand, parts, err)
	}
	sec, err1 := strconv.ParseInt(parts[0], 10, 64)
	usec, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: TIME answered %v", ErrStand, parts)
	}
	return sec*1000 + usec/1000, nil
}

// WaitFor polls cond until it holds or ctx ends.
func WaitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
