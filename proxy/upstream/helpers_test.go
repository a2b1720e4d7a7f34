package upstream

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
)

// testTimeout bounds every wait of a test.
const testTimeout = 15 * time.Second

// poll waits until cond holds, failing the test after testTimeout.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// noMetrics discards what an upstream reports.
type noMetrics struct{}

func (noMetrics) UpstreamError(string, string)     {}
func (noMetrics) Reconnect(string)                 {}
func (noMetrics) UpstreamState(string, bool, bool) {}
func (noMetrics) Follows(string)                   {}
func (noMetrics) Primary(string, string, string)   {}
func (noMetrics) Failover(string)                  {}

// startUpstream starts an upstream to addr with opts' defaults, closed at
// cleanup, and waits until it is served.
func startUpstream(t testing.TB, o Options) *Upstream {
	t.Helper()
	u, err := New(o.WithDefaults(), nil, new(cmdtable.Store), new(atomic.Int64), zap.NewNop(), noMetrics{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	poll(t, "the upstream to be served", u.Fenced)
	return u
}
