package proxy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/stand/node"
)

func TestTranscriptBasics(t *testing.T) { node.EachServer(t, testTranscriptBasics) }

func testTranscriptBasics(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("SET", "k", "v").is("+OK\r\n")
	c.do("GET", "k").is("$1\r\nv\r\n")
	c.do("GET", "missing").is("$-1\r\n")
	c.do("LPOP", "missing", "2").is("*-1\r\n")
	// Error texts are the server's: compared with the same server's own
	// answer (neither command changes the key).
	d := dial(t, n.Addr)
	c.do("INCR", "k").is(string(d.do("INCR", "k").got))
	c.do("LPUSH", "k", "x").is(string(d.do("LPUSH", "k", "x").got))
	c.do("PING").is("+PONG\r\n")
	c.do("ECHO", "hi").is("$2\r\nhi\r\n")
	c.write([]byte("SET inline \"a b\"\r\nGET inline\r\n"))
	c.read().is("+OK\r\n")
	c.read().is("$3\r\na b\r\n")
}

func TestPipelineOfThousandKeepsOrder(t *testing.T) {
	node.EachServer(t, testPipelineOfThousandKeepsOrder)
}

func testPipelineOfThousandKeepsOrder(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	var cmds [][]string
	var want []string
	for i := range 1000 {
		switch i % 4 {
		case 0:
			cmds = append(cmds, cmd("SET", "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)))
			want = append(want, "+OK\r\n")
		case 1:
			cmds = append(cmds, cmd("GET", "k"+strconv.Itoa(i-1)))
			v := "v" + strconv.Itoa(i-1)
			want = append(want, fmt.Sprintf("$%d\r\n%s\r\n", len(v), v))
		case 2:
			cmds = append(cmds, cmd("ECHO", strconv.Itoa(i))) // answered by the proxy itself
			want = append(want, fmt.Sprintf("$%d\r\n%d\r\n", len(strconv.Itoa(i)), i))
		case 3:
			cmds = append(cmds, cmd("INCR", "counter"))
			want = append(want, fmt.Sprintf(":%d\r\n", i/4+1))
		}
	}
	c.send(cmds...)
	for i, w := range want {
		if got := c.read().got; string(got) != w {
			t.Fatalf("reply %d = %q, want %q", i, got, w)
		}
	}
}

func TestRefusedCommandInsidePipeline(t *testing.T) {
	node.EachServer(t, testRefusedCommandInsidePipeline)
}

func testRefusedCommandInsidePipeline(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	ctx := context.Background()
	before, err := node.CommandStats(ctx, n.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	unknown := strings.Repeat("ab", 20)
	refused := cmd("EVALSHA", unknown, "0")
	want := rewrite.Decide(toArgs(refused), &rewrite.State{}, h.srv.Policy())
	if want.Action != rewrite.Refuse {
		t.Fatalf("decision for an unknown sha: %v", want.Action)
	}
	c := h.dial()
	c.send(cmd("SET", "a", "1"), refused, cmd("FLUSHALL"), cmd("INCR", "a"))
	c.read().is("+OK\r\n")
	c.read().is(string(want.Reply))
	c.read().hasPrefix("-DENIED ")
	c.read().is(":2\r\n")
	after, err := node.CommandStats(ctx, n.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"evalsha", "flushall"} {
		if after[name] != before[name] {
			t.Errorf("%s reached the upstream: %d -> %d", name, before[name], after[name])
		}
	}
}

func toArgs(s []string) [][]byte {
	out := make([][]byte, len(s))
	for i, a := range s {
		out[i] = []byte(a)
	}
	return out
}

func TestMultiExecSpreadOverReads(t *testing.T) { node.EachServer(t, testMultiExecSpreadOverReads) }

func testMultiExecSpreadOverReads(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("MULTI").is("+OK\r\n")
	c.do("SET", "t", "1").is("+QUEUED\r\n")
	c.do("INCR", "t").is("+QUEUED\r\n")
	other := h.dial()
	other.do("GET", "t").is("$-1\r\n") // nothing sent before EXEC
	c.do("EXEC").is("*2\r\n+OK\r\n:2\r\n")
	c.do("GET", "t").is("$1\r\n2\r\n")

	// An error at run time stays inside EXEC's array.
	c.do("MULTI").is("+OK\r\n")
	c.do("LPUSH", "t", "x").is("+QUEUED\r\n")
	c.do("EXEC").is("*1\r\n" + string(dial(t, n.Addr).do("LPUSH", "t", "x").got))

	// DISCARD drops the queue.
	c.do("MULTI").is("+OK\r\n")
	c.do("SET", "t", "9").is("+QUEUED\r\n")
	c.do("DISCARD").is("+OK\r\n")
	c.do("GET", "t").is("$1\r\n2\r\n")
	c.do("EXEC").is(string(dial(t, n.Addr).do("EXEC").got)) // the proxy answers it as the server would
}

func TestMultiExecInOneBatchIsRelayedVerbatim(t *testing.T) {
	node.EachServer(t, testMultiExecInOneBatchIsRelayedVerbatim)
}

func testMultiExecInOneBatchIsRelayedVerbatim(t *testing.T, srv node.Server) {
	direct := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	tx := [][]string{cmd("MULTI"), cmd("SET", "a", "1"), cmd("NOSUCHCOMMAND", "x"), cmd("INCR", "a"), cmd("EXEC"), cmd("GET", "a")}
	d, p := dial(t, direct.Addr), h.dial()
	d.send(tx...)
	p.send(tx...)
	for i := range tx {
		want := d.read().got
		p.read().is(string(want))
		if i == 2 && !strings.HasPrefix(string(want), "-ERR unknown command") {
			t.Errorf("server queued an unknown command: %q", want)
		}
	}
}

func TestExecAbortAfterRefusal(t *testing.T) { node.EachServer(t, testExecAbortAfterRefusal) }

func testExecAbortAfterRefusal(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("MULTI").is("+OK\r\n")
	c.do("SET", "x", "1").is("+QUEUED\r\n")
	c.do("FLUSHALL").hasPrefix("-DENIED ")
	// The server's own answer to EXEC after a command it refused to queue.
	d := dial(t, n.Addr)
	d.do("MULTI").is("+OK\r\n")
	d.do("NOSUCHCOMMAND").hasPrefix("-ERR ")
	c.do("EXEC").is(string(d.do("EXEC").got))
	c.do("GET", "x").is("$-1\r\n")
}

func TestQuitDropsTheRest(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.send(cmd("SET", "q", "1"), cmd("QUIT"), cmd("SET", "q", "2"))
	c.read().is("+OK\r\n")
	c.read().is("+OK\r\n")
	c.closed()
	h.dial().do("GET", "q").is("$1\r\n1\r\n")
}

func TestMaxClients(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.MaxClients = 2 })
	a, b := h.dial(), h.dial()
	a.do("SET", "m", "1").is("+OK\r\n")
	b.do("GET", "m").is("$1\r\n1\r\n")
	c := h.dial()
	c.read().is("-ERR max number of clients reached\r\n")
	c.closed()
	a.do("QUIT").is("+OK\r\n")
	a.closed()
	poll(t, "a client slot to free", func() bool { return h.srv.clients.Load() < 2 })
	h.dial().do("GET", "m").is("$1\r\n1\r\n")
}

func TestOverLimitHeaderClosesOnlyThatClient(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.MaxBulk = 1024 })
	good := h.dial()
	good.do("SET", "g", "1").is("+OK\r\n")
	bad := h.dial()
	bad.write([]byte("*1\r\n$9223372036854775807\r\n"))
	bad.read().is("-ERR Protocol error: invalid bulk length\r\n")
	bad.closed()
	bad2 := h.dial()
	bad2.write([]byte("*2\r\n$3\r\nGET\r\n$1025\r\n"))
	bad2.read().is("-ERR Protocol error: invalid bulk length\r\n")
	bad2.closed()
	bad3 := h.dial()
	bad3.write([]byte("*1\r\n$4\r\nPING\r\n*9223372036854775807\r\n"))
	bad3.read().is("+PONG\r\n")
	bad3.read().is("-ERR Protocol error: invalid multibulk length\r\n")
	bad3.closed()
	good.do("GET", "g").is("$1\r\n1\r\n")
}

func TestAuthRequiredBeforeCommands(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.Policy.Users = map[string]string{"default": "secret"} })
	c := h.dial()
	c.do("GET", "a").hasPrefix("-NOAUTH ")
	c.do("AUTH", "wrong").hasPrefix("-WRONGPASS ")
	c.do("AUTH", "secret").is("+OK\r\n")
	c.do("SET", "a", "1").is("+OK\r\n")
	c.do("GET", "a").is("$1\r\n1\r\n")
	// Before AUTH, redis's tighter header limits apply.
	u := h.dial()
	u.write([]byte("*11\r\n"))
	u.read().is("-ERR Protocol error: unauthenticated multibulk length\r\n")
	u.closed()
}

func TestUpstreamAuthAndSelect(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare, Password: "pw"})
	h := startProxy(t, n, func(o *Options) { o.Upstream.DB = 3; o.Policy.DB = 3 })
	h.dial().do("SET", "in3", "x").is("+OK\r\n")
	d := dial(t, n.Addr)
	d.do("AUTH", "pw").is("+OK\r\n")
	d.do("SELECT", "3").is("+OK\r\n")
	d.do("GET", "in3").is("$1\r\nx\r\n")
}

func TestBigValuesAndReplyCap(t *testing.T) { node.EachServer(t, testBigValuesAndReplyCap) }

func testBigValuesAndReplyCap(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.MaxReplyBytes = 3 << 20 })
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	c := h.dial()
	c.do("SET", "big", big).is("+OK\r\n")
	c.do("GET", "big").is("$1048576\r\n" + big + "\r\n")
	// Three 1 MiB replies in one batch exceed the 3 MiB cap: closed.
	c.send(cmd("GET", "big"), cmd("GET", "big"), cmd("GET", "big"), cmd("GET", "big"))
	c.closed()
	// The shared connection stayed in sync for everyone else.
	d := h.dial()
	d.do("STRLEN", "big").is(":1048576\r\n")
	d.do("GET", "big").is("$1048576\r\n" + big + "\r\n")
}

func TestBlockingCommandDoesNotStallOthers(t *testing.T) {
	node.EachServer(t, testBlockingCommandDoesNotStallOthers)
}

func testBlockingCommandDoesNotStallOthers(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	b := h.dial()
	b.send(cmd("BLPOP", "jobs", "0"))
	o := h.dial()
	for i := range 50 {
		o.do("INCR", "other").is(":" + strconv.Itoa(i+1) + "\r\n")
	}
	o.do("RPUSH", "jobs", "j1").is(":1\r\n")
	b.read().is("*2\r\n$4\r\njobs\r\n$2\r\nj1\r\n")
	b.do("BLPOP", "jobs", "0.05").is("*-1\r\n")
	b.do("GET", "other").is("$2\r\n50\r\n")
}

func TestBlockedClientLeavingFreesItsCommand(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	b := h.dial()
	b.send(cmd("BLPOP", "q2", "0"))
	admin := dial(t, n.Addr)
	poll(t, "the BLPOP to block upstream", func() bool {
		return strings.Contains(string(admin.do("INFO", "clients").got), "blocked_clients:1")
	})
	_ = b.nc.Close()
	poll(t, "the blocked command to go", func() bool {
		return strings.Contains(string(admin.do("INFO", "clients").got), "blocked_clients:0")
	})
	h.dial().do("RPUSH", "q2", "x").is(":1\r\n")
	admin.do("LLEN", "q2").is(":1\r\n") // nobody took it
}

func TestWatchFailedExecIsNullArray(t *testing.T) { node.EachServer(t, testWatchFailedExecIsNullArray) }

func testWatchFailedExecIsNullArray(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	a, b := h.dial(), h.dial()
	a.do("WATCH", "w").is("+OK\r\n")
	b.do("SET", "w", "changed").is("+OK\r\n")
	a.do("MULTI").is("+OK\r\n")
	a.do("SET", "w", "mine").is("+QUEUED\r\n")
	a.do("EXEC").is("*-1\r\n")
	a.do("GET", "w").is("$7\r\nchanged\r\n")
	// Unchanged: EXEC applies.
	a.do("WATCH", "w").is("+OK\r\n")
	a.do("MULTI").is("+OK\r\n")
	a.do("SET", "w", "mine").is("+QUEUED\r\n")
	a.do("EXEC").is("*1\r\n+OK\r\n")
	b.do("GET", "w").is("$4\r\nmine\r\n")
}

func TestSwapPolicyAppliesToNextBatch(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("SET", "p", "1").is("+OK\r\n")
	next := *h.srv.Policy()
	next.Users = map[string]string{"default": "pw"}
	h.srv.SwapPolicy(&next)
	c.do("GET", "p").hasPrefix("-NOAUTH ")
	c.do("AUTH", "pw").is("+OK\r\n")
	c.do("GET", "p").is("$1\r\n1\r\n")
}

func TestSlowBigCommandIsAssembled(t *testing.T) { node.EachServer(t, testSlowBigCommandIsAssembled) }

func testSlowBigCommandIsAssembled(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	val := strings.Repeat("x", 200_000)
	raw := resp.AppendCommand(nil, "SET", "slow", val)
	for len(raw) > 0 { // in pieces, so the buffer grows as the bytes arrive
		k := min(len(raw), 7000)
		c.write(raw[:k])
		raw = raw[k:]
	}
	c.read().is("+OK\r\n")
	c.do("STRLEN", "slow").is(":200000\r\n")
	if got := len(c.do("GET", "slow").got); got != 200_000+len("$200000\r\n\r\n") {
		t.Errorf("GET returned %d bytes", got)
	}
}

func TestShutdownClosesIdleClients(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("SET", "s", "1").is("+OK\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	c.closed()
	if h.srv.Ready() {
		t.Error("ready after shutdown")
	}
}
