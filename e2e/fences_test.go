package e2e

import (
	"bufio"
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The fence proofs (proxy.md "Fences", job-core.md "Brands and the version
// key"): the legacy client's own wire-4 fence through the proxy, the
// proxy's wire-6 fence on every upstream connection, and an upstream
// replaced behind the proxy's back.

// front is a proxy in front of one node for the fence proofs.
type front struct {
	srv  *proxy.Server
	addr string
}

// startFront starts a proxy in front of addr with the wire-6 fence
// (install as given) and waits until it has tried the upstream once.
func startFront(t testing.TB, m *shamap.Map, addr string, install bool, mod func(*proxy.Options)) *front {
	t.Helper()
	opts := proxy.Options{
		Upstream: proxy.UpstreamOptions{Name: "module", Address: addr},
		OnConnect: func(ctx context.Context, c fence.Conn) error {
			_, err := fence.CheckModule(ctx, c, m, install)
			return err
		},
		Policy: &rewrite.Policy{Map: m},
	}
	if mod != nil {
		mod(&opts)
	}
	srv, addr := ServeProxy(t, opts, nil)
	f := &front{srv: srv, addr: addr}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitFor(ctx, func() bool {
		return srv.Ready() || srv.Upstream().LastError() != nil && !errors.Is(srv.Upstream().LastError(), proxy.ErrUnavailable)
	}); err != nil {
		t.Fatalf("the proxy never tried its upstream: %v", srv.Readiness())
	}
	return f
}

// fenceRecorder keeps the legacy client's fence exchange.
type fenceRecorder struct{ lines []string }

func (r *fenceRecorder) record(c legacy.Call) {
	if c.Op == "fence" {
		r.lines = append(r.lines, strings.Join(c.Line, " ")+" -> "+c.Reply.String())
	}
}

// nodeKeys is every key on a node with its type and string value.
func nodeKeys(t testing.TB, n *node.Node) map[string]string {
	t.Helper()
	c := n.Client(t)
	keys, err := c.Do(testCtx(t), c.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		typ, _ := c.Do(testCtx(t), c.B().Type().Key(k).Build()).ToString()
		v := typ
		if typ == "string" {
			v, _ = c.Do(testCtx(t), c.B().Get().Key(k).Build()).ToString()
		}
		out[k] = v
	}
	return out
}

// clientCommands is the commandstats delta without the commands the
// proxy's own fence and the test's reads run. The test's valkey-go client
// asks for the topology with CLUSTER SLOTS on Redis 7.0 and CLUSTER SHARDS
// on Valkey 8: both are the test's own.
func clientCommands(d map[string]int64) map[string]int64 {
	out := maps.Clone(d)
	for _, c := range []string{"emq.version", "get", "info", "keys", "type", "hello", "ping", "client|setinfo", "command|docs", "command", "cluster|slots", "cluster|shards"} {
		delete(out, c)
	}
	return out
}

func TestLegacyFenceThroughTheProxy(t *testing.T) { node.EachServer(t, testLegacyFenceThroughTheProxy) }

func testLegacyFenceThroughTheProxy(t *testing.T, server node.Server) {
	m := LoadMap(t)
	type upstream struct {
		name    string
		opts    node.Options
		brand   string // written directly after start ("" = as started)
		install bool
		passes  bool
		reason  error  // the proxy's fence error when it fails
		after   string // {emq}:version on the node afterwards ("" = absent)
	}
	for _, u := range []upstream{
		{name: "branded module node", opts: node.Options{Role: node.Module}, passes: true, after: fence.ModuleBrand},
		{name: "scripts node", opts: node.Options{Role: node.Scripts}, reason: fence.ErrNotModule, after: "echomq:4.0.0"},
		{name: "unbranded scripts node", opts: node.Options{Role: node.Scripts, NoBrand: true}, reason: fence.ErrNotModule},
		{name: "bare node", opts: node.Options{Role: node.Bare}, reason: fence.ErrNotModule},
		{name: "unbranded module node, install off", opts: node.Options{Role: node.Module, NoBrand: true}, reason: fence.ErrBrandAbsent},
		{name: "module node with a foreign brand", opts: node.Options{Role: node.Module, NoBrand: true}, brand: "acme:1.0.0", reason: fence.ErrForeignBrand, after: "acme:1.0.0"},
		{name: "module node with the legacy brand", opts: node.Options{Role: node.Module, NoBrand: true}, brand: "echomq:4.0.0", reason: fence.ErrForeignBrand, after: "echomq:4.0.0"},
		{name: "unbranded module node, install on", opts: node.Options{Role: node.Module, NoBrand: true}, install: true, passes: true, after: fence.ModuleBrand},
	} {
		t.Run(u.name, func(t *testing.T) {
			n := node.StartT(t, withServer(u.opts, server))
			if u.brand != "" {
				if _, err := node.RawDo(n.Addr, "SET", legacy.VersionKey, u.brand); err != nil {
					t.Fatal(err)
				}
			}
			direct := n.Client(t)
			keysBefore := nodeKeys(t, n)
			before := commandStats(t, direct)
			f := startFront(t, m, n.Addr, u.install, nil)
			if u.install {
				// Installing wrote the brand and nothing else.
				if d := delta(before, commandStats(t, direct)); d["emq.install"] != 1 {
					t.Errorf("install ran %v, want one EMQ.INSTALL", d)
				}
				want := maps.Clone(keysBefore)
				want[legacy.VersionKey] = fence.ModuleBrand
				if got := nodeKeys(t, n); !maps.Equal(got, want) {
					t.Errorf("keys after install %v, want %v", got, want)
				}
			}

			rec := &fenceRecorder{}
			c, err := legacy.Dial(testCtx(t), legacy.Options{Addr: f.addr, Map: m, Record: rec.record})
			if u.passes {
				if err != nil {
					t.Fatalf("the legacy client's fence failed: %v (proxy: %v)", err, f.srv.Readiness())
				}
				defer c.Close()
				if want := []string{"GET {emq}:version -> \"echomq:4.0.0\""}; !slices.Equal(rec.lines, want) {
					t.Errorf("fence exchange %q, want %q", rec.lines, want)
				}
				want(t, true)(c.Enqueue(testCtx(t), "fence", "J1", "p"))
				// The client's own SET NX on the key answers nil and writes nothing.
				v, err := c.Do(testCtx(t), "SET", legacy.VersionKey, legacy.DefaultBrand, "NX")
				if err != nil || v.Kind != legacy.KindNil {
					t.Errorf("SET NX through the proxy: %v %v, want nil", v, err)
				}
			} else {
				if err == nil {
					c.Close()
					t.Fatal("the legacy client passed its fence through an unfenced proxy")
				}
				var fe *legacy.FenceError
				if !errors.As(err, &fe) || fe.Refused != "FENCE upstream is not fenced; {emq}:version is unavailable" {
					t.Fatalf("dial: %v, want the version-fence error", err)
				}
				if err := f.srv.Readiness(); !errors.Is(err, u.reason) {
					t.Errorf("proxy readiness %v, want %v", err, u.reason)
				}
				if want := []string{"GET {emq}:version -> (error) FENCE upstream is not fenced; {emq}:version is unavailable"}; !slices.Equal(rec.lines, want) {
					t.Errorf("fence exchange %q, want %q", rec.lines, want)
				}
				// Nothing the client sent reached the node.
				if d := clientCommands(delta(before, commandStats(t, direct))); len(d) != 0 {
					t.Errorf("commands reached the unfenced node: %v", d)
				}
			}
			keys := nodeKeys(t, n)
			if got := keys[legacy.VersionKey]; got != u.after {
				t.Errorf("{emq}:version is %q, want %q", got, u.after)
			}
		})
	}
}

func TestWire6SessionReadsTheTrueBrand(t *testing.T) {
	node.EachServer(t, testWire6SessionReadsTheTrueBrand)
}

func testWire6SessionReadsTheTrueBrand(t *testing.T, server node.Server) {
	m := LoadMap(t)
	n := node.StartT(t, node.Options{Server: server.Path, Role: node.Module})
	f := startFront(t, m, n.Addr, false, nil)
	wire4, err := node.RawDo(f.addr, "GET", legacy.VersionKey)
	if err != nil || string(wire4) != "$12\r\nechomq:4.0.0\r\n" {
		t.Fatalf("wire-4 GET: %q %v", wire4, err)
	}
	nc, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	var b []byte
	b = resp.AppendCommand(b, "EMQ.VERSION")
	b = resp.AppendCommand(b, "GET", legacy.VersionKey)
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	if r, err := resp.ReadReply(br); err != nil || !strings.HasPrefix(string(r), "*6\r\n$4\r\nwire\r\n$12\r\nechomq:6.0.0\r\n") {
		t.Fatalf("EMQ.VERSION: %q %v", r, err)
	}
	if r, err := resp.ReadReply(br); err != nil || string(r) != "$12\r\nechomq:6.0.0\r\n" {
		t.Fatalf("wire-6 GET: %q %v, want the true brand", r, err)
	}
}

func TestUpstreamReplacedByAScriptsNodeAndBack(t *testing.T) {
	node.EachServer(t, testUpstreamReplacedByAScriptsNodeAndBack)
}

func testUpstreamReplacedByAScriptsNodeAndBack(t *testing.T, server node.Server) {
	m := LoadMap(t)
	n := node.StartT(t, node.Options{Server: server.Path, Role: node.Module})
	f := startFront(t, m, n.Addr, false, nil)
	c, err := legacy.Dial(testCtx(t), legacy.Options{Addr: f.addr, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want(t, true)(c.Enqueue(testCtx(t), "swap", "J1", "p"))

	// The same port, now a scripts node (a fresh keyspace, legacy brand).
	if err := n.Restart(node.Options{Role: node.Scripts}); err != nil {
		t.Fatal(err)
	}
	direct := n.Client(t)
	before := commandStats(t, direct)
	keysBefore := nodeKeys(t, n)
	ctx := testCtx(t)
	if err := WaitFor(ctx, func() bool { return errors.Is(f.srv.Readiness(), fence.ErrNotModule) }); err != nil {
		t.Fatalf("the proxy never failed the fence on the scripts node: %v", f.srv.Readiness())
	}
	// The connected client gets the fence error on every call.
	for i := range 5 {
		_, err := c.Enqueue(ctx, "swap", "J2", "p")
		if err == nil || !strings.Contains(err.Error(), "unavailable") || !strings.Contains(err.Error(), "not a module node") {
			t.Fatalf("enqueue %d on the scripts node: %v, want the fence error", i, err)
		}
	}
	if _, _, err := c.Claim(ctx, "swap", 30000); err == nil {
		t.Fatal("claim passed while the fence fails")
	}
	// A reconnect runs the client's own fence, which stops it.
	var fe *legacy.FenceError
	if err := c.Reconnect(ctx); !errors.As(err, &fe) || fe.Refused == "" {
		t.Fatalf("reconnect: %v, want the version-fence error", err)
	}
	// No client command reached the scripts node.
	if d := clientCommands(delta(before, commandStats(t, direct))); len(d) != 0 {
		t.Errorf("commands reached the scripts node: %v", d)
	}
	if got := nodeKeys(t, n); !maps.Equal(got, keysBefore) || got[legacy.VersionKey] != "echomq:4.0.0" {
		t.Errorf("scripts node keys %v, before %v", got, keysBefore)
	}

	// The module node back on the same port: service resumes without a
	// proxy restart, after the fence ran again.
	if err := n.Restart(node.Options{Role: node.Module}); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := WaitFor(ctx, f.srv.Ready); err != nil {
		t.Fatalf("never ready again: %v", f.srv.Readiness())
	}
	t.Logf("ready %v after the module node answered", time.Since(back).Round(time.Millisecond))
	if err := c.Reconnect(ctx); err != nil {
		t.Fatalf("reconnect after the module node returned: %v", err)
	}
	want(t, true)(c.Enqueue(ctx, "swap", "J3", "p"))
	if _, empty, err := c.Claim(ctx, "swap", 30000); err != nil || empty {
		t.Fatalf("claim after the return: %v %v", empty, err)
	}
}
