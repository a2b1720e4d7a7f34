package proxy

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// psStep is one step of a pub/sub transcript: commands the subscriber
// sends (in one write), a command a publisher sends directly to the node,
// and how many replies the subscriber then reads.
type psStep struct {
	sub  [][]string
	pub  []string
	read int
}

// psTranscript runs steps with a subscriber connected to subAddr and a
// publisher connected to pubAddr (the node itself), and returns every reply
// each got, in order, as "sub: <bytes>" / "pub: <bytes>" lines.
func psTranscript(t *testing.T, subAddr, pubAddr string, steps []psStep) []string {
	t.Helper()
	sub, pub := dial(t, subAddr), dial(t, pubAddr)
	var out []string
	for _, st := range steps {
		if len(st.sub) > 0 {
			sub.send(st.sub...)
		}
		if st.pub != nil {
			out = append(out, "pub: "+string(pub.do(st.pub...).got))
		}
		for range st.read {
			out = append(out, "sub: "+string(sub.read().got))
		}
	}
	return out
}

// compareTranscripts fails on the first difference.
func compareTranscripts(t *testing.T, want, got []string) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("direct %d replies, proxy %d:\n direct %q\n proxy  %q", len(want), len(got), want, got)
	}
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("reply %d:\n direct %q\n proxy  %q", i, want[i], got[i])
		}
	}
}

func TestSubscribeTranscriptMatchesDirect(t *testing.T) {
	direct := node.StartT(t, node.Options{Role: node.Bare})
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	bin := "\x00\r\n$*-+:\xff"
	steps := []psStep{
		{sub: [][]string{cmd("SET", "k", "v")}, read: 1},
		{sub: [][]string{cmd("SUBSCRIBE", "a", "b")}, read: 2},
		{pub: cmd("PUBLISH", "a", "hello"), read: 1},
		{sub: [][]string{cmd("PSUBSCRIBE", "news.*", "x?")}, read: 2},
		{pub: cmd("PUBLISH", "news.sport", "pm"), read: 1},
		{pub: cmd("PUBLISH", "xy", bin), read: 1},
		{pub: cmd("PUBLISH", "b", ""), read: 1},
		{pub: cmd("PUBLISH", "nobody", "lost")},
		// PING in subscribe mode, with and without an argument.
		{sub: [][]string{cmd("PING"), cmd("ping", "hi there")}, read: 2},
		// Commands subscribe mode does not allow: the server's own texts.
		{sub: [][]string{cmd("GET", "k")}, read: 1},
		{sub: [][]string{cmd("CLIENT", "INFO"), cmd("NOSUCHCOMMAND", "x"), cmd("SUBSCRIBE"), cmd("PING", "a", "b")}, read: 4},
		{sub: [][]string{cmd("HELLO", "2")}, read: 1},
		{sub: [][]string{cmd("SSUBSCRIBE", "{s}1")}, read: 1},
		{pub: cmd("SPUBLISH", "{s}1", "shard"), read: 1},
		// Pipelined with messages in between.
		{sub: [][]string{cmd("UNSUBSCRIBE", "a"), cmd("PING"), cmd("UNSUBSCRIBE", "a")}, read: 3},
		{sub: [][]string{cmd("UNSUBSCRIBE", "b"), cmd("PUNSUBSCRIBE", "news.*", "x?")}, read: 3},
		// Channels and patterns at 0, a shard channel left: still subscribed.
		{sub: [][]string{cmd("GET", "k")}, read: 1},
		{sub: [][]string{cmd("SUNSUBSCRIBE", "{s}1")}, read: 1},
		// Back to normal service.
		{sub: [][]string{cmd("GET", "k"), cmd("PING"), cmd("PING", "x")}, read: 3},
		// In and out within one write, then normal commands.
		{sub: [][]string{cmd("SUBSCRIBE", "c"), cmd("UNSUBSCRIBE", "c"), cmd("SET", "k2", "v2"), cmd("GET", "k2")}, read: 4},
		// UNSUBSCRIBE without a subscription, outside subscribe mode.
		{sub: [][]string{cmd("UNSUBSCRIBE"), cmd("PUNSUBSCRIBE"), cmd("GET", "k2")}, read: 3},
		// RESET leaves subscribe mode.
		{sub: [][]string{cmd("SUBSCRIBE", "d")}, read: 1},
		{sub: [][]string{cmd("RESET"), cmd("GET", "k")}, read: 2},
		{pub: cmd("PUBLISH", "d", "after reset")},
		// Enter again; QUIT answers +OK and closes.
		{sub: [][]string{cmd("PSUBSCRIBE", "e*")}, read: 1},
		{pub: cmd("PUBLISH", "ee", "last"), read: 1},
		{sub: [][]string{cmd("QUIT"), cmd("GET", "k")}, read: 1},
	}
	want := psTranscript(t, direct.Addr, direct.Addr, steps)
	got := psTranscript(t, h.addr, n.Addr, steps)
	compareTranscripts(t, want, got)
	for _, w := range []string{"Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
		"Can't execute 'client|info'", "*4\r\n$8\r\npmessage\r\n", "*3\r\n$8\r\nsmessage\r\n", "*2\r\n$4\r\npong\r\n$0\r\n\r\n"} {
		if !strings.Contains(strings.Join(want, ""), w) {
			t.Errorf("the transcript never showed %q", w)
		}
	}
	// The proxy's subscriber connections are gone from the node.
	admin := dial(t, n.Addr)
	poll(t, "the subscriber connections to close", func() bool {
		return string(admin.do("PUBSUB", "NUMPAT").got) == ":0\r\n" &&
			string(admin.do("PUBSUB", "NUMSUB", "a", "d").got) == "*4\r\n$1\r\na\r\n:0\r\n$1\r\nd\r\n:0\r\n"
	})
}

func TestSubscribeThenQuitClosesAfterTheReplies(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.send(cmd("SUBSCRIBE", "q"), cmd("PING"), cmd("QUIT"), cmd("SET", "dropped", "1"))
	c.read().is("*3\r\n$9\r\nsubscribe\r\n$1\r\nq\r\n:1\r\n")
	c.read().is("*2\r\n$4\r\npong\r\n$0\r\n\r\n")
	c.read().is("+OK\r\n")
	c.closed()
	dial(t, n.Addr).do("EXISTS", "dropped").is(":0\r\n")
}

func TestSubscribeModeEndsBeforePolicyCommands(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("SET", "keep", "1").is("+OK\r\n")
	admin := dial(t, n.Addr)
	clients := func() int { return strings.Count(string(admin.do("CLIENT", "LIST").got), "\n") }
	before := clients()
	// Out of subscribe mode, FLUSHALL is the proxy's to decide: denied,
	// never sent on the subscriber's connection.
	c.send(cmd("SUBSCRIBE", "c"), cmd("UNSUBSCRIBE", "c"), cmd("FLUSHALL"), cmd("GET", "keep"))
	c.read().is("*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n")
	c.read().is("*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n")
	c.read().hasPrefix("-DENIED ")
	c.read().is("$1\r\n1\r\n")
	// Still subscribed: the server refuses it without running it.
	c.do("SUBSCRIBE", "c").is("*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n")
	c.do("FLUSHALL").is("-ERR Can't execute 'flushall': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n")
	c.do("UNSUBSCRIBE").is("*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n")
	c.do("GET", "keep").is("$1\r\n1\r\n")
	// A SUBSCRIBE the server refuses leaves the client in normal service.
	c.do("SUBSCRIBE").is("-ERR wrong number of arguments for 'subscribe' command\r\n")
	c.do("FLUSHALL").hasPrefix("-DENIED ")
	// An idle client that left subscribe mode gives its connection back.
	poll(t, "the subscriber's connection to close", func() bool { return clients() == before })
}

func TestSubscriberGetsTenThousandMessagesInOrder(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	sub := h.dial()
	sub.do("SUBSCRIBE", "stream").is("*3\r\n$9\r\nsubscribe\r\n$6\r\nstream\r\n:1\r\n")
	const total = 10000
	pub := dial(t, n.Addr)
	began := time.Now()
	go func() { // the publisher pipelines everything; replies are read below
		var b []byte
		for i := range total {
			b = resp.AppendCommand(b, "PUBLISH", "stream", "m-"+strconv.Itoa(i))
		}
		_, _ = pub.nc.Write(b)
	}()
	for i := range total {
		m := "m-" + strconv.Itoa(i)
		want := "*3\r\n$7\r\nmessage\r\n$6\r\nstream\r\n$" + strconv.Itoa(len(m)) + "\r\n" + m + "\r\n"
		if got := sub.read().got; string(got) != want {
			t.Fatalf("message %d: %q, want %q", i, got, want)
		}
	}
	elapsed := time.Since(began)
	for range total {
		pub.read().is(":1\r\n")
	}
	t.Logf("%d messages in order through the proxy in %v (%.0f msg/s)", total, elapsed, total/elapsed.Seconds())
	sub.do("UNSUBSCRIBE", "stream").is("*3\r\n$11\r\nunsubscribe\r\n$6\r\nstream\r\n:0\r\n")
	sub.do("PING").is("+PONG\r\n")
}

func TestSlowSubscriberIsClosedAtTheCap(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	const limit = 1 << 20
	h := startProxy(t, n, func(o *Options) { o.MaxReplyBytes = limit })
	slow := h.dial()
	slow.do("SUBSCRIBE", "flood").is("*3\r\n$9\r\nsubscribe\r\n$5\r\nflood\r\n:1\r\n")
	other := h.dial()
	other.do("SUBSCRIBE", "quiet").is("*3\r\n$9\r\nsubscribe\r\n$5\r\nquiet\r\n:1\r\n")
	pub := dial(t, n.Addr)
	payload := strings.Repeat("p", 64*1024)
	rejected := h.srv.met.Rejected.WithLabelValues("subscriber_bytes")
	// The slow client never reads: the kernel's buffers fill, then the
	// proxy's, up to the cap.
	for i := 0; readCounter(t, rejected) == 0; i++ {
		if i > 4000 {
			t.Fatalf("no subscriber closed after %d MiB", i/16)
		}
		pub.do("PUBLISH", "flood", payload)
	}
	poll(t, "the slow subscriber's upstream connection to close", func() bool {
		return string(pub.do("PUBSUB", "NUMSUB", "flood").got) == "*2\r\n$5\r\nflood\r\n:0\r\n"
	})
	// The slow client was closed (after what the kernel held); the other
	// subscriber is served.
	_ = slow.nc.SetReadDeadline(time.Now().Add(testTimeout))
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(slow.br); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("slow subscriber: %v", err)
	}
	if buf.Len() > 8*limit {
		t.Errorf("the slow subscriber got %d bytes before the close", buf.Len())
	}
	pub.do("PUBLISH", "quiet", "still here").is(":1\r\n")
	other.read().is("*3\r\n$7\r\nmessage\r\n$5\r\nquiet\r\n$10\r\nstill here\r\n")
}

func TestSubscriberUpstreamKilledClosesTheClient(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("SUBSCRIBE", "k").is("*3\r\n$9\r\nsubscribe\r\n$1\r\nk\r\n:1\r\n")
	admin := dial(t, n.Addr)
	admin.do("CLIENT", "KILL", "TYPE", "pubsub").is(":1\r\n")
	c.closed()
	h.dial().do("PING").is("+PONG\r\n")
}

func TestSubscriberLeavingClosesItsUpstream(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	admin := dial(t, n.Addr)
	for i := range 3 {
		c := h.dial()
		ch := fmt.Sprintf("gone%d", i)
		c.do("SUBSCRIBE", ch).hasPrefix("*3\r\n$9\r\nsubscribe\r\n")
		_ = c.nc.Close()
	}
	poll(t, "the subscribers' upstream connections to close", func() bool {
		return string(admin.do("PUBSUB", "CHANNELS").got) == "*0\r\n"
	})
}

// readCounter reads a counter's value.
func readCounter(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestShutdownClosesSubscribers(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("SUBSCRIBE", "s").is("*3\r\n$9\r\nsubscribe\r\n$1\r\ns\r\n:1\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	began := time.Now()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	c.closed()
	t.Logf("shutdown with a subscriber took %v", time.Since(began))
	admin := dial(t, n.Addr)
	poll(t, "the subscriber's upstream connection to close", func() bool {
		return string(admin.do("PUBSUB", "NUMSUB", "s").got) == "*2\r\n$1\r\ns\r\n:0\r\n"
	})
}
