package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The share of a shared connection (share.go), against a real node.

// isolatedBy is the proxy's emqproxy_client_isolated_total{reason}.
func (h *harness) isolatedBy(reason string) float64 {
	return testutil.ToFloat64(h.srv.met.Isolated.WithLabelValues(reason))
}

// nodeClients is the node's connected_clients.
func nodeClients(t *testing.T, n *node.Node) int {
	t.Helper()
	info, err := node.RawDo(n.Addr, "INFO", "clients")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(info), "\r\n") {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			c, _ := strconv.Atoi(v)
			return c
		}
	}
	t.Fatalf("no connected_clients in %q", info)
	return 0
}

// monitor records which node connection ran each command that contains
// match, in the order the node ran them: the connection's address per
// command.
type monitor struct {
	nc    net.Conn
	mu    sync.Mutex
	addrs []string
	done  chan struct{}
}

func startMonitor(t *testing.T, n *node.Node, match string) *monitor {
	t.Helper()
	nc, err := net.DialTimeout("tcp", n.Addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	m := &monitor{nc: nc, done: make(chan struct{})}
	t.Cleanup(func() { _ = nc.Close(); <-m.done })
	br := bufio.NewReader(nc)
	if _, err := nc.Write(resp.AppendCommand(nil, "MONITOR")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	go func() {
		defer close(m.done)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			// +1733000000.123456 [0 127.0.0.1:54321] "INCR" "ctr"
			open, close := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
			if open < 0 || close < open || !strings.Contains(line, match) {
				continue
			}
			f := strings.Fields(line[open+1 : close])
			m.mu.Lock()
			m.addrs = append(m.addrs, f[len(f)-1])
			m.mu.Unlock()
		}
	}()
	return m
}

// seen returns the addresses recorded so far, once there are want.
func (m *monitor) seen(t *testing.T, want int) []string {
	t.Helper()
	var got []string
	poll(t, fmt.Sprintf("MONITOR shows %d commands", want), func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		got = append(got[:0], m.addrs...)
		return len(got) >= want
	})
	return got
}

// A client's deep pipeline leaves in parts of ShareCommands on the shared
// connection, at most limits.SharePipelineParts of them in a row before the
// client is moved to a connection of its own, where the rest goes; the
// replies are the server's, in order; after IsolateFor without a heavy
// batch the client is back on the shared connection and its own
// connection is closed.
func TestShareDeepPipelineIsIsolated(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	const share, isolateFor = 8, 300 * time.Millisecond
	h := startProxy(t, n, func(o *Options) { o.ShareCommands, o.IsolateFor = share, isolateFor })
	c := h.dial()
	c.do("PING").is("+PONG\r\n") // the shared connection is up
	clients := nodeClients(t, n)
	mon := startMonitor(t, n, `"INCR" "ctr"`)

	const total = 200
	var batch []byte
	for range total {
		batch = resp.AppendCommand(batch, "INCR", "ctr")
	}
	c.write(batch)
	for i := 1; i <= total; i++ {
		c.read().is(":" + strconv.Itoa(i) + "\r\n")
	}
	if got := h.isolatedBy("pipeline"); got != 1 {
		t.Errorf("isolated for pipeline %v times, want 1", got)
	}
	addrs := mon.seen(t, total)
	shared := addrs[0]
	onShared, switched := 0, -1
	for i, a := range addrs {
		if a == shared {
			onShared++
			if switched >= 0 {
				t.Errorf("command %d went on the shared connection after the client was moved at %d", i, switched)
			}
		} else if switched < 0 {
			switched = i
		} else if a != addrs[switched] {
			t.Errorf("command %d on a third connection %s", i, a)
		}
	}
	if onShared > limits.SharePipelineParts*share {
		t.Errorf("%d commands of one client on the shared connection, want at most %d parts of %d", onShared, limits.SharePipelineParts, share)
	}
	if onShared == total {
		t.Fatal("the client was never moved to a connection of its own")
	}
	if got := nodeClients(t, n); got != clients+2 { // its own connection, and MONITOR
		t.Errorf("the node has %d clients, want %d (+ MONITOR + the client's own)", got, clients)
	}
	// Its own connection serves it (small commands keep it isolated only
	// until IsolateFor has passed).
	c.do("INCR", "ctr").is(":201\r\n")
	time.Sleep(isolateFor) // the isolation's duration itself
	c.do("INCR", "ctr").is(":202\r\n")
	poll(t, "the isolated connection closed", func() bool { return nodeClients(t, n) == clients+1 })
	if got := testutil.ToFloat64(h.srv.met.IsolatedNow); got != 0 {
		t.Errorf("emqproxy_client_isolated = %v after the isolation ended", got)
	}
	addrs = mon.seen(t, total+2)
	if addrs[total] == shared || addrs[total+1] != shared {
		t.Errorf("after the batch: INCR on %s then %s; want its own connection, then the shared one %s", addrs[total], addrs[total+1], shared)
	}
}

// A client over its reply cap costs the node one part, not its whole
// batch: with 500 GETs of a 1 MiB value pipelined and a 4 MiB cap, the
// client is closed after its first part (limits.ShareStart commands: its replies
// are not known to be small yet), and the rest is never sent.
func TestShareReplyCapStopsTheBatch(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	if _, err := node.RawDo(n.Addr, "SET", "mib", strings.Repeat("m", 1<<20)); err != nil {
		t.Fatal(err)
	}
	const share = 16
	h := startProxy(t, n, func(o *Options) { o.ShareCommands, o.MaxReplyBytes = share, 4<<20 })
	cl := n.Client(t)
	before, err := node.CommandStats(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	c := h.dial()
	var batch []byte
	for range 500 {
		batch = resp.AppendCommand(batch, "GET", "mib")
	}
	c.write(batch)
	c.closed()
	after, err := node.CommandStats(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if ran := after["get"] - before["get"]; ran > limits.ShareStart || ran == 0 {
		t.Errorf("the node ran %d of the 500 GETs, want one first part (at most %d)", ran, limits.ShareStart)
	}
	if got := testutil.ToFloat64(h.srv.met.Rejected.WithLabelValues("reply_bytes")); got != 1 {
		t.Errorf("rejected{reply_bytes} = %v, want 1", got)
	}
	// Others are served on.
	h.dial().do("STRLEN", "mib").is(":1048576\r\n")
}

// A command or a reply larger than ShareBytes moves its client to a
// connection of its own, before the command is sent (command_bytes) or
// after the reply is read (reply_bytes); the bytes are the server's, and
// a transaction on the client's own connection works as on the shared one.
func TestShareLargeCommandsAndRepliesAreIsolated(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, func(o *Options) { o.ShareBytes = 64 << 10 })
	big := strings.Repeat("b", 256<<10)
	if _, err := node.RawDo(n.Addr, "SET", "big", big); err != nil {
		t.Fatal(err)
	}
	reader := h.dial()
	reader.do("GET", "big").is("$262144\r\n" + big + "\r\n")
	if got := h.isolatedBy("reply_bytes"); got != 1 {
		t.Errorf("isolated for reply_bytes %v times, want 1", got)
	}
	writer := h.dial()
	writer.do("SET", "big2", big).is("+OK\r\n")
	if got := h.isolatedBy("command_bytes"); got != 1 {
		t.Errorf("isolated for command_bytes %v times, want 1", got)
	}
	writer.send(cmd("MULTI"), cmd("STRLEN", "big2"), cmd("INCR", "n"), cmd("EXEC"))
	writer.read().is("+OK\r\n")
	writer.read().is("+QUEUED\r\n")
	writer.read().is("+QUEUED\r\n")
	writer.read().is("*2\r\n:262144\r\n:1\r\n")
	if got := testutil.ToFloat64(h.srv.met.IsolatedNow); got != 2 {
		t.Errorf("emqproxy_client_isolated = %v, want 2", got)
	}
	// A well-behaved client stays on the shared connection.
	small := h.dial()
	for range 100 {
		small.do("INCR", "m")
	}
	if got := testutil.ToFloat64(h.srv.met.IsolatedNow); got != 2 {
		t.Errorf("emqproxy_client_isolated = %v after a small client's 100 commands, want 2", got)
	}
}

// TestIsolatedClientSwitchingProtocolGetsItsReplies: a client isolated on a
// connection of its own that switches to RESP3 (HELLO 3) gets RESP3 replies
// after it, as on the server: its own connection, opened in RESP2, is not
// used for the new protocol.
func TestIsolatedClientSwitchingProtocolGetsItsReplies(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, func(o *Options) { o.ShareBytes = 64 << 10 })
	c := h.dial()
	c.do("SET", "big", strings.Repeat("b", 256<<10)).is("+OK\r\n")
	if got := h.isolatedBy("command_bytes"); got != 1 {
		t.Fatalf("isolated for command_bytes %v times, want 1", got)
	}
	c.do("HSET", "h", "f", "v").is(":1\r\n")
	c.do("HGETALL", "h").is("*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
	c.do("HELLO", "3").hasPrefix("%")
	c.do("HGETALL", "h").is("%1\r\n$1\r\nf\r\n$1\r\nv\r\n")
	c.do("HELLO", "2").hasPrefix("*")
	c.do("HGETALL", "h").is("*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
}
