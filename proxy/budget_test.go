package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// floodTimeout bounds one flooding client's connection: eight 96 MiB
// commands pass one or two at a time on a busy machine.
const floodTimeout = 2 * time.Minute

// memPeak samples the process's heap and stacks in use until stopped and
// keeps the largest value seen.
type memPeak struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

// inUse is the process's heap and stack bytes in use now.
func inUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// sampleMem starts sampling every 2ms.
func sampleMem() *memPeak {
	m := &memPeak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if v := inUse(); v > m.peak.Load() {
				m.peak.Store(v)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// end stops sampling and returns the peak.
func (m *memPeak) end() uint64 {
	close(m.stop)
	<-m.done
	return m.peak.Load()
}

// vmRSS reads the process's resident set from /proc (0 when unreadable).
func vmRSS(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// sendBigSet writes `SET key <size bytes>` in 1 MiB pieces (so the test's
// own memory stays small) and returns the reply.
func sendBigSet(addr, key string, size int) (string, error) {
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(floodTimeout))
	head := fmt.Sprintf("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, size)
	if _, err := nc.Write([]byte(head)); err != nil {
		return "", err
	}
	piece := bytes.Repeat([]byte("x"), 1<<20)
	for left := size; left > 0; left -= len(piece) {
		if _, err := nc.Write(piece[:min(left, len(piece))]); err != nil {
			return "", err
		}
	}
	if _, err := nc.Write([]byte("\r\n")); err != nil {
		return "", err
	}
	b, err := resp.ReadReply(bufio.NewReader(nc))
	return string(b), err
}

// TestBufferedBytesBoundTheProcess runs on the stand's default server
// only: what it bounds is the proxy's own buffering of a client's command,
// which does not depend on the server behind it, and each run streams
// 768 MiB through the proxy (half a minute under the race detector).
func TestBufferedBytesBoundTheProcess(t *testing.T) {
	node.Long(t)
	testBufferedBytesBoundTheProcess(t, node.Redis())
}

// Eight clients each send a 96 MiB SET at once while a ninth sends GETs:
// the ninth is served throughout, every SET succeeds or gets the budget's
// error, and the process's heap stays a few hundred MiB above where it
// began (it went past 1 GiB when every client's command was buffered and
// copied at once).
func testBufferedBytesBoundTheProcess(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	ninth := h.dial()
	ninth.do("SET", "small", "v").is("+OK\r\n")

	const clients, size = 8, 96 << 20
	runtime.GC()
	base := inUse()
	mem := sampleMem()
	var wg sync.WaitGroup
	var done atomic.Int32
	replies := make([]string, clients)
	errs := make([]error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			replies[i], errs[i] = sendBigSet(h.addr, "big", size)
		}()
	}
	// The ninth client is served while the SETs stream: it counts the GETs
	// answered before the last SET's reply.
	gets, during := 0, 0
	for done.Load() < clients {
		_ = ninth.nc.SetDeadline(time.Now().Add(testTimeout))
		ninth.do("GET", "small").is("$1\r\nv\r\n")
		gets++
		if done.Load() < clients {
			during++
		}
	}
	wg.Wait()
	peak := mem.end()
	ok := 0
	for i := range clients {
		switch {
		case errs[i] != nil:
			t.Errorf("SET %d: %v", i, errs[i])
		case replies[i] == "+OK\r\n":
			ok++
		case strings.HasPrefix(replies[i], "-ERR emqproxy: ") && strings.Contains(replies[i], "limits.buffered_bytes"):
		default:
			t.Errorf("SET %d answered %q", i, replies[i])
		}
	}
	grew := peak - min(base, peak)
	t.Logf("%d of %d SETs of %d MiB succeeded; heap+stacks %d MiB at start, peak %d MiB (+%d MiB); VmHWM %d MiB; %d GETs answered during the flood",
		ok, clients, size>>20, base>>20, peak>>20, grew>>20, vmRSS("VmHWM")>>20, during)
	if ok == 0 {
		t.Error("no SET succeeded")
	}
	if during < 10 {
		t.Errorf("the ninth client got %d GETs answered while the SETs streamed, want at least 10", during)
	}
	// The default budget is 128 MiB: with the runtime's garbage on top the
	// heap may reach about twice that, well under the shipped manifests'
	// 512 Mi.
	const bound = 384 << 20
	if grew > bound {
		t.Errorf("the heap grew by %d MiB under the flood, want at most %d MiB", grew>>20, bound>>20)
	}
	// Every client is still served afterwards.
	ninth.do("STRLEN", "big").is(":" + strconv.Itoa(size) + "\r\n")
}

// bigCommand encodes a command whose last argument is size bytes of fill.
func bigCommand(size int, fill byte, args ...string) []byte {
	b := resp.AppendCommand(nil, append(args, strings.Repeat(string(fill), size))...)
	return b
}

func TestBudgetRefusals(t *testing.T) { node.EachServer(t, testBudgetRefusals) }

// A command larger than the whole budget gets the budget's error and its
// client is closed; a reply that does not fit is replaced by an error
// saying the command ran; a transaction's command that does not fit
// discards the transaction. Every other client, and the refused reply's
// own client, is served on.
func testBudgetRefusals(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	const budget = 4 << 20
	h := startProxy(t, n, func(o *Options) { o.MaxBuffered = budget })
	other := h.dial()
	direct := dial(t, n.Addr)

	// Larger than the budget: refused, closed, nothing written.
	c := h.dial()
	c.write(bigCommand(budget+1<<20, 'a', "SET", "huge"))
	r := c.read()
	r.hasPrefix("-ERR emqproxy: command too large for the proxy's memory budget (")
	if !strings.Contains(string(r.got), "limits.buffered_bytes is 4194304") {
		t.Errorf("the refusal does not name the budget: %q", r.got)
	}
	c.closed()
	direct.do("EXISTS", "huge").is(":0\r\n")
	other.do("PING").is("+PONG\r\n")
	if got := readCounter(t, h.srv.met.Rejected.WithLabelValues(pubsub.ReasonMemoryBudget)); got != 1 {
		t.Errorf("memory_budget closes counted %v, want 1", got)
	}

	// The same from a subscribed client: the error after its messages.
	sub := h.dial()
	sub.do("SUBSCRIBE", "news").is("*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n")
	direct.do("PUBLISH", "news", "before").is(":1\r\n")
	sub.write(bigCommand(budget+1<<20, 'n', "SUBSCRIBE"))
	sub.read().is("*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$6\r\nbefore\r\n")
	sub.read().hasPrefix("-ERR emqproxy: command too large for the proxy's memory budget (")
	sub.closed()

	// A reply larger than the budget: the command ran, its reply is an
	// error, the client goes on.
	direct.write(bigCommand(budget+1<<20, 'b', "SET", "wide"))
	direct.read().is("+OK\r\n")
	c = h.dial()
	c.do("GET", "wide").is(droppedForBudget)
	c.do("STRLEN", "wide").is(":" + strconv.Itoa(budget+1<<20) + "\r\n")
	c.do("GETDEL", "wide").is(droppedForBudget)
	direct.do("EXISTS", "wide").is(":0\r\n") // it ran
	c.do("PING").is("+PONG\r\n")

	// A transaction's command that fits the input but not a copy of it
	// next to the input: refused, and EXEC discards the transaction.
	c.do("MULTI").is("+OK\r\n")
	c.do("SET", "tx:1", "v").is("+QUEUED\r\n")
	c.write(bigCommand(3<<20, 'c', "SET", "tx:2"))
	c.read().is("-ERR emqproxy: the proxy's memory budget (limits.buffered_bytes) is in use by other clients; the transaction will be discarded at EXEC\r\n")
	c.do("EXEC").is("-EXECABORT Transaction discarded because of previous errors.\r\n")
	direct.do("EXISTS", "tx:1", "tx:2").is(":0\r\n")
	c.do("PING").is("+PONG\r\n")
	other.do("PING").is("+PONG\r\n")

	// Everything was given back.
	poll(t, "the budget to be released", func() bool { used, _ := h.srv.mem.InUse(); return used == 0 })
}

func TestBudgetCommandsOfSeveralLargeArguments(t *testing.T) {
	node.EachServer(t, testBudgetCommandsOfSeveralLargeArguments)
}

// Clients whose commands each hold part of the budget and need more (an
// MSET of two large values, each asked for when its length is read) all
// complete: one of them at a time goes past the budget, so they never wait
// for each other for good.
func testBudgetCommandsOfSeveralLargeArguments(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.MaxBuffered = 8 << 20 })
	const clients, size = 4, 3 << 20
	var wg sync.WaitGroup
	replies := make([]string, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.DialTimeout("tcp", h.addr, testTimeout)
			if err != nil {
				replies[i] = err.Error()
				return
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(floodTimeout))
			val := strings.Repeat(string(rune('a'+i)), size)
			k := "m:" + strconv.Itoa(i)
			go func() { _, _ = nc.Write(resp.AppendCommand(nil, "MSET", k+":a", val, k+":b", val)) }()
			b, err := resp.ReadReply(bufio.NewReader(nc))
			if err != nil {
				replies[i] = err.Error()
				return
			}
			replies[i] = string(b)
		}()
	}
	wg.Wait()
	direct := dial(t, n.Addr)
	for i, r := range replies {
		if r != "+OK\r\n" {
			t.Errorf("MSET %d answered %q", i, r)
		}
		direct.do("STRLEN", "m:"+strconv.Itoa(i)+":b").is(":" + strconv.Itoa(size) + "\r\n")
	}
	if _, waits := h.srv.mem.InUse(); waits == 0 {
		t.Error("no client waited for the budget: the test did not exercise it")
	}
	poll(t, "the budget to be released", func() bool { used, _ := h.srv.mem.InUse(); return used == 0 })
}

func TestBudgetLargeRewrittenCall(t *testing.T) { node.EachServer(t, testBudgetLargeRewrittenCall) }

// A pinned verb call with a payload past refMin goes upstream from the
// client's read buffer (its head rewritten, its tail referenced): the
// module node gets the payload byte for byte.
func testBudgetLargeRewrittenCall(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	h := startProxy(t, n, nil)
	enq, _ := h.srv.Policy().Map.ByName("enqueue")
	payload := strings.Repeat("p", 3*pipe.RefMin) + "end"
	c := h.dial()
	c.send(cmd("PING"), cmd("EVALSHA", enq.SHA, "2", "emq:{big}:job:J1", "emq:{big}:pending", "J1", payload), cmd("PING"))
	c.read().is("+PONG\r\n")
	c.read().is(":1\r\n")
	c.read().is("+PONG\r\n")
	dial(t, n.Addr).do("HGET", "emq:{big}:job:J1", "payload").is("$" + strconv.Itoa(len(payload)) + "\r\n" + payload + "\r\n")
}

func TestBudgetClosesASubscriberThatDoesNotRead(t *testing.T) {
	node.EachServer(t, testBudgetClosesASubscriberThatDoesNotRead)
}

// A subscriber that stops reading while messages arrive is closed once
// the messages waiting for it do not fit in the budget (well before its
// own max_reply_bytes), and the budget is given back.
func testBudgetClosesASubscriberThatDoesNotRead(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, func(o *Options) { o.MaxBuffered = 1 << 20 })
	sub := h.dial()
	sub.do("SUBSCRIBE", "news").is("*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n")
	pub := dial(t, n.Addr)
	msg := strings.Repeat("m", 256<<10)
	rejected := h.srv.met.Rejected.WithLabelValues(pubsub.ReasonMemoryBudget)
	// Publish until the proxy lets the subscriber go (the kernel's socket
	// buffers take a few MiB first).
	for i := 0; readCounter(t, rejected) == 0; i++ {
		if i == 4096 {
			t.Fatal("the subscriber was never closed")
		}
		pub.do("PUBLISH", "news", msg).hasPrefix(":")
	}
	poll(t, "the subscriber's connection to go", func() bool { return h.srv.clients.Load() == 0 })
	poll(t, "the budget to be released", func() bool { used, _ := h.srv.mem.InUse(); return used == 0 })
	h.dial().do("PING").is("+PONG\r\n")
}

func TestBudgetLargeTransactions(t *testing.T) { node.EachServer(t, testBudgetLargeTransactions) }

// A transaction whose queued commands pass refMin goes upstream at EXEC
// without a copy, in normal service and bridged (a RESP3 client with
// tracking on), and so does a large command of a bridged client: the node
// gets every byte.
func testBudgetLargeTransactions(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	direct := dial(t, n.Addr)
	a, b := strings.Repeat("a", pipe.RefMin), strings.Repeat("b", pipe.RefMin)+"end"
	check := func(prefix string) {
		t.Helper()
		direct.do("GET", prefix+":a").is("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
		direct.do("GET", prefix+":b").is("$" + strconv.Itoa(len(b)) + "\r\n" + b + "\r\n")
	}
	c := h.dial()
	c.send(cmd("MULTI"), cmd("SET", "tx:a", a), cmd("SET", "tx:b", b), cmd("EXEC"), cmd("MULTI"), cmd("SET", "tx2:a", a), cmd("EXEC"))
	for _, want := range []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n+OK\r\n+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n"} {
		c.read().is(want)
	}
	check("tx")
	direct.do("STRLEN", "tx2:a").is(":" + strconv.Itoa(len(a)) + "\r\n")

	r3 := h.dial()
	r3.do("HELLO", "3").hasPrefix("%")
	r3.do("CLIENT", "TRACKING", "on").is("+OK\r\n")
	r3.send(cmd("MULTI"), cmd("SET", "br:a", a), cmd("SET", "br:b", b), cmd("EXEC"), cmd("SET", "br1", b), cmd("PING"))
	for _, want := range []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n+OK\r\n+OK\r\n", "+OK\r\n", "+PONG\r\n"} {
		r3.read().is(want)
	}
	check("br")
	direct.do("STRLEN", "br1").is(":" + strconv.Itoa(len(b)) + "\r\n")
	poll(t, "the budget to be released", func() bool { used, _ := h.srv.mem.InUse(); return used == 0 })
}

// droppedForBudget is the reply that stands for one dropped for the memory
// budget.
const droppedForBudget = "-ERR emqproxy: reply dropped: the proxy's memory budget (limits.buffered_bytes) is in use by other clients; the command was executed\r\n"
