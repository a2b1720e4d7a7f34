package upstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestDedicatedConnectionWriteTimeout: a dedicated connection's write is
// bounded by the upstream's timeout: a command too large for the socket's
// buffers, sent to a stalled server, gets the lost error once the timeout
// passes, instead of holding its client until the server comes back; and
// nothing of it is applied.
func TestDedicatedConnectionWriteTimeout(t *testing.T) {
	node.EachServer(t, testDedicatedConnectionWriteTimeout)
}

func testDedicatedConnectionWriteTimeout(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
	const timeout = 300 * time.Millisecond
	u := startUpstream(t, Options{Name: "node", Address: n.Addr, Password: n.Opts.Password, Timeout: timeout})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	p, err := u.Dedicated(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	node.FreezeT(t, n)
	b := pipe.NewBatch()
	b.Out = resp.AppendCommand(nil, "SET", "big", strings.Repeat("x", 32<<20))
	b.N, b.Max = 1, 1<<20
	done := make(chan struct{})
	go func() {
		defer close(done)
		if p.Send(b) == nil {
			p.Await(b)
		}
	}()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("the write to the stalled server never finished")
	}
	if got, want := string(b.Reply(0)), "-UPSTREAM connection to node lost; the command may have been applied\r\n"; got != want {
		t.Errorf("reply %q, want the lost error", got)
	}
	if err := p.Failed(); !errors.Is(err, ErrTimeout) {
		t.Errorf("failed() = %v, want the timeout", err)
	}
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	if r, err := node.RawDo(n.Addr, "EXISTS", "big"); err != nil || string(r) != ":0\r\n" {
		t.Errorf("EXISTS big: %q %v (a partly written command was applied)", r, err)
	}
}
