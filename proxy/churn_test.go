package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestManyClientsClosingAtOnce: thousands of clients that go at once (a
// fleet restarting) end their sessions in about the time one takes each,
// however many end beside them. Each session's end once scanned every
// session still ending, and for each of those every session listed, so a
// burst of ends that outran the sessions' removal grew without bound:
// 4,000 clients closed together left 3,700 sessions unended a minute
// later, holding their memory, the client count and max_clients' room,
// and stalled a graceful shutdown.
func TestManyClientsClosingAtOnce(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, nil)
	const clients = 3000
	conns := make([]net.Conn, 0, clients)
	defer func() {
		for _, nc := range conns {
			_ = nc.Close()
		}
	}()
	for range clients {
		nc, err := net.DialTimeout("tcp", h.addr, testTimeout)
		if err != nil {
			t.Fatalf("client %d: %v", len(conns)+1, err)
		}
		conns = append(conns, nc)
	}
	poll(t, "every client's session", func() bool { return h.srv.clients.Load() == clients })
	began := time.Now()
	for _, nc := range conns {
		_ = nc.Close()
	}
	conns = conns[:0]
	poll(t, "every session to end", func() bool { return h.srv.clients.Load() == 0 })
	t.Logf("%d clients closed at once: their sessions ended in %v", clients, time.Since(began).Round(time.Millisecond))
	// The proxy still serves: the ended sessions left nothing behind that
	// a new client waits for.
	c := h.dial()
	c.do("PING").is("+PONG\r\n")
}
