package proxy

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// replyModeSteps exercise CLIENT REPLY's every rule: OFF until ON, SKIP
// for the next command only (ignored under OFF), SKIP SKIP, RESET, errors
// and refusals silenced, transactions, HELLO. The last command turns
// replies on, so the tag after it is read. (CLIENT REPLY inside MULTI is
// refused by the proxy: TestClientReplyInsideMultiIsRefused.)
var replyModeSteps = [][]string{
	cmd("CLIENT", "REPLY"), cmd("CLIENT", "REPLY", "FOO"), cmd("CLIENT", "REPLY", "ON", "x"),
	cmd("CLIENT", "REPLY", "on"), cmd("CLIENT", "REPLY", "SKIP"), cmd("PING", "a"), cmd("PING", "b"),
	cmd("CLIENT", "REPLY", "OFF"), cmd("PING", "c"), cmd("SET", "k", "1"), cmd("CLIENT", "REPLY", "SKIP"),
	cmd("PING", "d"), cmd("NOSUCHCOMMAND"), cmd("GET"), cmd("CLIENT", "REPLY", "FOO"), cmd("CLIENT", "REPLY"),
	cmd("DEBUG", "SLEEP", "0"), cmd("SELECT", "1"), cmd("CLIENT", "REPLY", "ON"), cmd("PING", "e"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("CLIENT", "REPLY", "SKIP"), cmd("PING", "f"), cmd("PING", "g"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("CLIENT", "REPLY", "ON"), cmd("PING", "h"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("CLIENT", "REPLY", "OFF"), cmd("PING", "i"), cmd("CLIENT", "REPLY", "ON"),
	cmd("CLIENT", "REPLY", "OFF"), cmd("RESET"), cmd("PING", "j"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("RESET"), cmd("PING", "k"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("MULTI"), cmd("INCR", "k"), cmd("EXEC"),
	cmd("CLIENT", "REPLY", "OFF"), cmd("MULTI"), cmd("INCR", "k"), cmd("GET", "k"), cmd("EXEC"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("CLIENT", "REPLY", "ON"), cmd("GET", "k"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("HELLO", "2"), cmd("INCR", "k"),
	cmd("CLIENT", "REPLY", "SKIP"), cmd("EVALSHA", strings.Repeat("0", 40), "0"), cmd("GET", "k"),
	cmd("CLIENT", "REPLY", "OFF"), cmd("CLIENT", "REPLY", "ON"),
}

// replyTranscript sends the steps (all in one write, or one write each)
// after HELLO proto, then PING tag, and returns every byte the client got
// before the tag's reply.
func replyTranscript(t *testing.T, addr, proto string, steps [][]string, oneWrite bool) string {
	c := dial(t, addr)
	c.do("HELLO", proto)
	c.do("SET", "k", "0").is("+OK\r\n")
	if oneWrite {
		return c.untilTag("end", steps...)
	}
	for _, st := range steps {
		c.send(st)
	}
	return c.untilTag("end")
}

// TestClientReplyMatchesTheServer: CLIENT REPLY ON|OFF|SKIP through the
// proxy silences exactly the replies the server silences, byte for byte,
// in RESP2 and RESP3, pipelined or not, errors and the proxy's own
// refusals included.
func TestClientReplyMatchesTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, nil)
		for _, proto := range []string{"2", "3"} {
			for _, one := range []bool{true, false} {
				want := replyTranscript(t, direct.Addr, proto, replyModeSteps, one)
				got := replyTranscript(t, h.addr, proto, replyModeSteps, one)
				if want != got {
					t.Errorf("RESP%s, one write %v:\n direct %q\n proxy  %q", proto, one, want, got)
				}
			}
		}
		// The silenced commands ran: k was incremented by every INCR.
		dial(t, behind.Addr).do("GET", "k").is(string(dial(t, direct.Addr).do("GET", "k").got))
		// QUIT is silenced and runs nothing after it; the proxy then closes
		// the connection (the server leaves it open, never reading it
		// again, until the client goes).
		for _, n := range []*node.Node{direct, behind} {
			c := dial(t, n.Addr)
			if n == behind {
				c = h.dial()
			}
			c.send(cmd("CLIENT", "REPLY", "OFF"), cmd("SET", "q", "before"), cmd("QUIT"), cmd("SET", "q", "after"))
			poll(t, "the SET before QUIT", func() bool { return string(dial(t, n.Addr).do("GET", "q").got) == "$6\r\nbefore\r\n" })
			if n == behind {
				c.closed()
			}
		}
		dial(t, direct.Addr).do("GET", "q").is("$6\r\nbefore\r\n")
		// A protocol error's reply is silenced too, and the proxy closes
		// the connection (the server leaves it open, never reading it again).
		c := h.dial()
		c.send(cmd("CLIENT", "REPLY", "SKIP"))
		c.write([]byte("*1\r\n$x\r\n"))
		c.closed()
	})
}

// pubStep is a subscriber's commands, then what a publisher on the node
// sends, then how many replies the subscriber reads.
type pubStep struct {
	sub  [][]string
	pub  []string
	read int
}

// replyPubSubRun runs steps on a subscriber to addr (HELLO proto first)
// with a publisher to pubAddr; it returns everything the subscriber read.
func replyPubSubRun(t *testing.T, addr, pubAddr, proto string, steps []pubStep) string {
	c, pub := dial(t, addr), dial(t, pubAddr)
	c.do("HELLO", proto)
	var b strings.Builder
	for _, st := range steps {
		c.send(st.sub...)
		if st.pub != nil {
			pub.do(st.pub...)
		}
		for range st.read {
			b.WriteString(string(c.read().got))
		}
	}
	if last := steps[len(steps)-1].sub; strings.EqualFold(last[len(last)-1][0], "QUIT") {
		rest, err := io.ReadAll(c.br)
		b.WriteString("|closed: " + string(rest))
		if err != nil {
			b.WriteString(err.Error())
		}
		return b.String()
	}
	b.WriteString("|" + c.untilTag("end", cmd("CLIENT", "REPLY", "ON")))
	return b.String()
}

// TestClientReplyInsideMultiIsRefused: the server would queue CLIENT REPLY
// and silence the rest of EXEC's array under a header that counts it; the
// proxy refuses it, which discards the transaction.
func TestClientReplyInsideMultiIsRefused(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("MULTI").is("+OK\r\n")
	c.do("CLIENT", "REPLY", "SKIP").is("-EMQREFUSED emqproxy answers 'CLIENT REPLY' itself and cannot queue it in MULTI\r\n")
	c.do("INCR", "k").is("+QUEUED\r\n")
	c.do("EXEC").is("-EXECABORT Transaction discarded because of previous errors.\r\n")
	c.do("GET", "k").is("$-1\r\n")
}

// TestClientReplyInSubscribeMode: a silenced client in subscribe mode (RESP2
// subscribe mode, and a bridged RESP3 client) still gets its pushes
// (confirmations, messages), not its replies, as from the server directly;
// a SKIP before SUBSCRIBE silences only that command.
func TestClientReplyInSubscribeMode(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, nil)
		resp2 := []pubStep{
			{sub: [][]string{cmd("CLIENT", "REPLY", "OFF"), cmd("SUBSCRIBE", "ch")}, read: 1},
			{sub: [][]string{cmd("PING"), cmd("GET", "k"), cmd("PING", "x")}, pub: cmd("PUBLISH", "ch", "hi"), read: 1},
			{sub: [][]string{cmd("CLIENT", "REPLY", "ON"), cmd("PSUBSCRIBE", "p*")}, read: 1},
			{sub: [][]string{cmd("UNSUBSCRIBE"), cmd("PUNSUBSCRIBE")}, read: 2},
			// Back to normal service, still silenced.
			{sub: [][]string{cmd("PING", "y"), cmd("CLIENT", "REPLY", "ON"), cmd("PING", "z")}, read: 2},
			// A SKIP before SUBSCRIBE: a failing one's error is dropped, a
			// good one's confirmation is a push; the next reply is not dropped.
			{sub: [][]string{cmd("CLIENT", "REPLY", "SKIP"), cmd("SUBSCRIBE"), cmd("PING", "after")}, read: 1},
			{sub: [][]string{cmd("CLIENT", "REPLY", "SKIP"), cmd("SUBSCRIBE", "a"), cmd("PING")}, read: 2},
			{sub: [][]string{cmd("CLIENT", "REPLY", "OFF"), cmd("QUIT")}},
		}
		resp3 := []pubStep{
			{sub: [][]string{cmd("CLIENT", "REPLY", "OFF"), cmd("SUBSCRIBE", "ch")}, read: 1},
			{sub: [][]string{cmd("PING"), cmd("GET", "k"), cmd("NOSUCHCOMMAND"), cmd("CLIENT", "REPLY", "SKIP")},
				pub: cmd("PUBLISH", "ch", "hi"), read: 1},
			{sub: [][]string{cmd("CLIENT", "REPLY", "ON"), cmd("CLIENT", "REPLY", "SKIP"), cmd("GET", "k"), cmd("PING", "x")}, read: 2},
			{sub: [][]string{cmd("CLIENT", "REPLY", "SKIP"), cmd("SUBSCRIBE", "d"), cmd("CLIENT", "REPLY", "SKIP"),
				cmd("PING"), cmd("CLIENT", "REPLY", "SKIP"), cmd("SUBSCRIBE"), cmd("PING", "y")}, read: 2},
			{sub: [][]string{cmd("CLIENT", "REPLY", "SKIP"), cmd("MULTI"), cmd("INCR", "n"), cmd("EXEC"),
				cmd("CLIENT", "REPLY", "SKIP"), cmd("GET", "n"), cmd("CLIENT", "GETNAME")}, read: 3},
			{sub: [][]string{cmd("CLIENT", "REPLY", "OFF"), cmd("MULTI"), cmd("INCR", "n"), cmd("EXEC"), cmd("UNSUBSCRIBE", "ch", "d")}, read: 2},
			{sub: [][]string{cmd("CLIENT", "REPLY", "SKIP"), cmd("CLIENT", "REPLY", "ON"), cmd("GET", "n")}, read: 2},
			{sub: [][]string{cmd("CLIENT", "REPLY", "SKIP"), cmd("RESET"), cmd("PING", "reset")}, read: 1},
		}
		tracking := []pubStep{
			{sub: [][]string{cmd("GET", "t")}, read: 1},
			{sub: [][]string{cmd("CLIENT", "REPLY", "SKIP"), cmd("CLIENT", "TRACKING", "ON"), cmd("GET", "t")}, read: 1},
			{sub: [][]string{cmd("CLIENT", "REPLY", "OFF")}, pub: cmd("SET", "t", "1"), read: 1},
			{sub: [][]string{cmd("GET", "t"), cmd("CLIENT", "REPLY", "ON"), cmd("GET", "t")}, read: 2},
		}
		for _, run := range []struct {
			proto string
			steps []pubStep
		}{{"2", resp2}, {"3", resp3}, {"3", tracking}} {
			want := replyPubSubRun(t, direct.Addr, direct.Addr, run.proto, run.steps)
			got := replyPubSubRun(t, h.addr, behind.Addr, run.proto, run.steps)
			want, got = helloIDField.ReplaceAllString(want, "id#"), helloIDField.ReplaceAllString(got, "id#")
			if want != got {
				t.Errorf("RESP%s:\n direct %q\n proxy  %q", run.proto, want, got)
			}
		}
	})
}

// TestClientReplyKeepsTheSharedConnectionInStep: one client silences its
// pipelined commands (OFF, SKIP) while another uses the same shared
// connection: every command of the first runs, the second's replies are
// its own and in order, and the first gets exactly its unsilenced ones.
func TestClientReplyKeepsTheSharedConnectionInStep(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		n := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, n, nil) // one shared connection (Conns 1)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := dial(t, h.addr)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := "v" + strconv.Itoa(i)
				b.send(cmd("SET", "b", v), cmd("GET", "b"), cmd("INCR", "bn"))
				b.read().is("+OK\r\n")
				b.read().is("$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n")
				b.read().is(":" + strconv.Itoa(i+1) + "\r\n")
				if t.Failed() {
					return
				}
			}
		}()
		a := dial(t, h.addr)
		for round := range 20 {
			cmds := [][]string{cmd("CLIENT", "REPLY", "OFF"), cmd("DEL", "a")}
			for range 50 {
				cmds = append(cmds, cmd("INCR", "a"))
			}
			cmds = append(cmds, cmd("GET", "a"), cmd("NOSUCHCOMMAND"), cmd("CLIENT", "REPLY", "ON"),
				cmd("CLIENT", "REPLY", "SKIP"), cmd("INCR", "a"), cmd("INCR", "a"),
				cmd("CLIENT", "REPLY", "SKIP"), cmd("GET", "a"), cmd("PING", strconv.Itoa(round)))
			a.send(cmds...)
			a.read().is("+OK\r\n")
			a.read().is(":52\r\n")
			a.read().is("$" + strconv.Itoa(len(strconv.Itoa(round))) + "\r\n" + strconv.Itoa(round) + "\r\n")
		}
		close(stop)
		wg.Wait()
		dial(t, n.Addr).do("GET", "a").is("$2\r\n52\r\n")
	})
}

// TestClientReplyOffClosesOnALostCommand: a silenced command whose upstream
// connection breaks in flight closes the client's connection, as a server
// connection lost under it would, instead of vanishing; other clients are
// still served.
func TestClientReplyOffClosesOnALostCommand(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	admin := dial(t, n.Addr)
	c := h.dial()
	c.send(cmd("CLIENT", "REPLY", "SKIP"), cmd("SET", "x", "1"), cmd("CLIENT", "REPLY", "ON"))
	c.read().is("+OK\r\n")
	c.send(cmd("CLIENT", "REPLY", "OFF"), cmd("BLPOP", "nothing", "0"))
	poll(t, "the BLPOP to block", func() bool {
		return strings.Contains(string(admin.do("INFO", "clients").got), "blocked_clients:1\r\n")
	})
	admin.do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").hasPrefix(":")
	c.closed()
	// The shared connection was killed too: found so by the proxy's idle
	// watch (every 100 ms) or by the GET's send, the GET goes on its
	// replacement. Both orders: at once, and after the watch's period.
	h.dial().do("GET", "x").is("$1\r\n1\r\n")
	admin.do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").hasPrefix(":")
	time.Sleep(250 * time.Millisecond)
	h.dial().do("GET", "x").is("$1\r\n1\r\n")
}
