package legacy_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/valkey-io/valkey-go"
)

// recorder keeps every Call the client recorded.
type recorder struct {
	mu    sync.Mutex
	calls []legacy.Call
}

func (r *recorder) record(c legacy.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

// ops returns the recorded calls of one op.
func (r *recorder) ops(op string) []legacy.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []legacy.Call
	for _, c := range r.calls {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dial connects a legacy client to addr, closed at cleanup.
func dial(t *testing.T, opts legacy.Options) (*legacy.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	if opts.Record == nil {
		opts.Record = rec.record
	}
	c, err := legacy.Dial(testCtx(t), opts)
	if err != nil {
		t.Fatalf("dial %s: %v", opts.Addr, err)
	}
	t.Cleanup(c.Close)
	return c, rec
}

// stats reads the node's INFO commandstats.
func stats(t *testing.T, vc valkey.Client) map[string]int64 {
	t.Helper()
	s, err := node.CommandStats(testCtx(t), vc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// delta returns after-before for the named commands.
func delta(before, after map[string]int64, names ...string) map[string]int64 {
	out := make(map[string]int64, len(names))
	for _, n := range names {
		out[n] = after[n] - before[n]
	}
	return out
}

// get reads a string key with the node's own client ("" and false when absent).
func get(t *testing.T, vc valkey.Client, key string) (string, bool) {
	t.Helper()
	s, err := vc.Do(testCtx(t), vc.B().Get().Key(key).Build()).ToString()
	if valkey.IsValkeyNil(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, true
}

// chk fails the test on an error and returns the value, so a call can be
// written inline: k.b(c.Enqueue(ctx, q, id, p)).
type chk struct{ t *testing.T }

func (k chk) b(v bool, err error) bool {
	k.t.Helper()
	if err != nil {
		k.t.Fatal(err)
	}
	return v
}

func (k chk) n(v int64, err error) int64 {
	k.t.Helper()
	if err != nil {
		k.t.Fatal(err)
	}
	return v
}

func (k chk) stats(v [6]int64, err error) [6]int64 {
	k.t.Helper()
	if err != nil {
		k.t.Fatal(err)
	}
	return v
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
