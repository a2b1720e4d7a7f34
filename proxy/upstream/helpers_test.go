package upstream

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/stand/node"
)

// testTimeout bounds every wait of a test.
const testTimeout = 15 * time.Second

// startUpstream starts an upstream to addr with opts' defaults, closed at
// cleanup, and waits until it is served.
func startUpstream(t testing.TB, o Options) *Upstream {
	t.Helper()
	u, err := New(o.WithDefaults(), nil, new(cmdtable.Store), new(atomic.Int64), zap.NewNop(), NopMetrics{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	node.Poll(t, "the upstream to be served", u.Fenced)
	return u
}
