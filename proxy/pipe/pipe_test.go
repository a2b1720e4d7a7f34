package pipe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The pipe alone (pipe.go), over a real server's connection, with
// faults injected by a wrapper around that connection (faultConn), by the
// server (CLIENT KILL, SIGSTOP) or by a close from another goroutine.

// testTimeout bounds every wait of a test.
const testTimeout = 15 * time.Second

// errInjected is the error a faultConn makes.
var errInjected = errors.New("injected fault")

// faultConn is a real connection to a server whose reads and writes a test
// can intercept: fail the next one, or hold one at a point of its choosing.
// It keeps the socket reachable (SyscallConn), so the pipe peeks at it as
// it does at a plain TCP connection. (Writes of a vector come one buffer at
// a time: one Write per batch.)
type faultConn struct {
	net.Conn
	sc syscall.Conn

	writes, reads atomic.Int64
	// failWrite and failRead, once set, make the next write (after half
	// its bytes) or the next read fail (the socket stays open: closing it
	// is the pipe's job).
	failWrite, failRead atomic.Bool
	// onWrite and onRead, when set (before the pipe is made), are called
	// with the call's number (from 1) instead of the plain call.
	onWrite func(i int64, b []byte) (int, error)
	onRead  func(i int64, b []byte) (int, error)
}

func (c *faultConn) Write(b []byte) (int, error) {
	i := c.writes.Add(1)
	if c.failWrite.CompareAndSwap(true, false) {
		n, _ := c.forward(b[:len(b)/2])
		return n, errInjected
	}
	if c.onWrite != nil {
		return c.onWrite(i, b)
	}
	return c.forward(b)
}

// forward writes b on the socket the way the pipe writes a plain TCP
// connection: as a vector (writev). (A plain Write would tell the race
// detector that the buffer is read after the bytes left, and the batch's
// session may already reuse it: its replies came back.)
func (c *faultConn) forward(b []byte) (int, error) {
	v := net.Buffers{b}
	n, err := v.WriteTo(c.Conn)
	return int(n), err
}

func (c *faultConn) Read(b []byte) (int, error) {
	i := c.reads.Add(1)
	if c.failRead.CompareAndSwap(true, false) {
		return 0, errInjected
	}
	if c.onRead != nil {
		return c.onRead(i, b)
	}
	return c.Conn.Read(b)
}

// SyscallConn implements syscall.Conn with the socket underneath.
func (c *faultConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// pipeNode starts a bare node of srv for a pipe test.
func pipeNode(t *testing.T, srv node.Server) *node.Node {
	t.Helper()
	return node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
}

// dialPipe connects a pipe to addr through fc. bg gives it a reader
// goroutine (a dedicated connection's); timeout is its reply and write
// timeout (0: none). At cleanup it is closed, and must be torn down.
func dialPipe(t *testing.T, addr string, fc *faultConn, timeout time.Duration, bg bool) *Pipe {
	t.Helper()
	return dialPipeWith(t, addr, fc, Options{Name: "node", Timeout: timeout, WriteTimeout: timeout, Background: bg})
}

// dialPipeWith is dialPipe with the pipe's options o.
func dialPipeWith(t *testing.T, addr string, fc *faultConn, o Options) *Pipe {
	t.Helper()
	bg := o.Background
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	_ = nc.(*net.TCPConn).SetNoDelay(true)
	fc.Conn, fc.sc = nc, nc.(syscall.Conn)
	p := New(fc, bufio.NewReaderSize(fc, ReadBufSize), o)
	if p.bg != bg {
		t.Fatalf("pipe bg %v, want %v", p.bg, bg)
	}
	t.Cleanup(func() {
		p.Close()
		waitDead(t, p)
	})
	return p
}

// waitDead fails the test unless p is torn down within the test's deadline.
func waitDead(t *testing.T, p *Pipe) {
	t.Helper()
	select {
	case <-p.dead:
	case <-time.After(testTimeout):
		t.Errorf("the pipe was never torn down\n%s", goroutines())
	}
}

// goroutines is every goroutine's stack, for a test that found one stuck.
func goroutines() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// incrBatch returns a batch of n INCR ctr.
func incrBatch(n int) *Batch {
	b := NewBatch()
	for range n {
		b.Out = resp.AppendCommand(b.Out, "INCR", "ctr")
	}
	b.N, b.Max = n, 1<<20
	return b
}

// sendAwait sends b on p and waits for its replies, in a goroutine; the
// channel is closed when b is complete (replies filled with the unavailable
// error when send fails, as a session does).
func sendAwait(p *Pipe, b *Batch) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Send(b); err != nil {
			b.Fill(UnavailableReply(p.name, err.Error()))
			return
		}
		p.Await(b)
	}()
	return done
}

// finishes fails the test unless done is closed within the test's deadline.
func finishes(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("%s: still waiting after %v\n%s", what, testTimeout, goroutines())
	}
}

// pipeState polls p's state (under its lock) until cond holds.
func pipeState(t *testing.T, p *Pipe, what string, cond func() bool) {
	t.Helper()
	node.Poll(t, what, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return cond()
	})
}

// serverCounter waits until the server has closed every connection but the
// one asking (so it has run everything it read), and returns ctr and the
// calls of INCR the server counted.
func serverCounter(t *testing.T, n *node.Node) (ctr, incrs int64) {
	t.Helper()
	node.Poll(t, "the server to drop the pipe's connection", func() bool {
		raw, err := node.RawDo(n.Addr, "INFO", "clients")
		return err == nil && bytes.Contains(raw, []byte("connected_clients:1\r\n"))
	})
	raw, err := node.RawDo(n.Addr, "GET", "ctr")
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != "$-1\r\n" {
		s := strings.Split(string(raw), "\r\n")
		if _, err := fmt.Sscan(s[1], &ctr); err != nil {
			t.Fatalf("GET ctr: %q", raw)
		}
	}
	raw, err = node.RawDo(n.Addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := node.ParseCommandStats(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	return ctr, stats["incr"]
}

// TestPipeWriteErrorHandsTheReaderOn: the reader drops its role while a
// batch waits in the queue for the writer (the reader's own batch was
// complete and nothing else was in flight); the writer then writes that
// batch and the write fails. The batch must still be answered (with the
// lost error): nobody else will read.
func TestPipeWriteErrorHandsTheReaderOn(t *testing.T) {
	node.EachServer(t, testPipeWriteErrorHandsTheReaderOn)
}

func testPipeWriteErrorHandsTheReaderOn(t *testing.T, srv node.Server) {
	n := pipeNode(t, srv)
	gate1, gate2a, gate2b := make(chan struct{}), make(chan struct{}), make(chan struct{})
	fc := &faultConn{}
	fc.onWrite = func(i int64, b []byte) (int, error) {
		switch i {
		case 1: // a: held before it leaves
			<-gate1
		case 2: // b: held before it leaves, and after
			<-gate2a
			n, err := fc.forward(b)
			<-gate2b
			return n, err
		case 3: // c: fails, nothing written
			_ = fc.Conn.Close()
			return 0, errInjected
		}
		return fc.forward(b)
	}
	// The second write passes to the writer's goroutine.
	p := dialPipeWith(t, n.Addr, fc, Options{Name: "node", MaxCombinedWrites: 1})
	a, b, c := incrBatch(1), incrBatch(1), incrBatch(1)

	// a's session takes the writer's role and is held in the write.
	doneA := sendAwait(p, a)
	pipeState(t, p, "a in flight", func() bool { return p.writing && len(p.inflight) == 1 })
	// b queues behind it, and its session takes the reader's role.
	doneB := sendAwait(p, b)
	pipeState(t, p, "b queued with a reader", func() bool { return p.reading && len(p.queue) == 1 })
	// a leaves; the writer's goroutine takes b; the reader answers a.
	close(gate1)
	finishes(t, "a", doneA)
	node.Poll(t, "b's write to start", func() bool { return fc.writes.Load() == 2 })
	// c queues, and its session waits: a reader is there.
	doneC := sendAwait(p, c)
	node.Poll(t, "c's session to wait", func() bool { return waitingInAwait(1) })
	// b leaves; the reader answers it, its own, and drops the role while c
	// is still queued behind b's write.
	close(gate2a)
	finishes(t, "b", doneB)
	pipeState(t, p, "the reader's role dropped", func() bool { return !p.reading && len(p.queue) == 1 })
	// c's write fails.
	close(gate2b)
	finishes(t, "c", doneC)

	if got := string(a.Reply(0)); got != ":1\r\n" {
		t.Errorf("a: %q", got)
	}
	if got := string(b.Reply(0)); got != ":2\r\n" {
		t.Errorf("b: %q", got)
	}
	if got := string(c.Reply(0)); got != string(p.lostMsg) || !c.ReplyLost(0) {
		t.Errorf("c: %q (marked lost: %v), want the lost error", got, c.ReplyLost(0))
	}
	if a.ReplyLost(0) || b.ReplyLost(0) {
		t.Error("an answered reply is marked lost")
	}
	waitDead(t, p)
	if err := p.Failed(); !errors.Is(err, ErrLost) || !errors.Is(err, errInjected) {
		t.Errorf("failed() = %v, want the lost write", err)
	}
	if ctr, incrs := serverCounter(t, n); ctr != 2 || incrs != 2 {
		t.Errorf("ctr %d after %d INCRs, want 2 and 2 (c was never written)", ctr, incrs)
	}
}

// waitingInAwait reports whether n goroutines started by sendAwait wait
// in Pipe.Await for a signal.
func waitingInAwait(n int) bool {
	count := 0
	for _, g := range strings.Split(goroutines(), "\n\n") {
		if strings.Contains(g, "[chan receive") && strings.Contains(g, ").Await(") && strings.Contains(g, "sendAwait") {
			count++
		}
	}
	return count == n
}

// TestPipeCloseWhileTheReaderFinishes: close comes while the reader reads
// its batch's last reply, and the reader then drops its role (nothing else
// waits) without touching the socket again. The pipe must still be torn
// down: the upstream waits for that to reconnect, or to shut down.
func TestPipeCloseWhileTheReaderFinishes(t *testing.T) {
	node.EachServer(t, testPipeCloseWhileTheReaderFinishes)
}

func testPipeCloseWhileTheReaderFinishes(t *testing.T, srv node.Server) {
	n := pipeNode(t, srv)
	read, gate := make(chan struct{}), make(chan struct{})
	fc := &faultConn{}
	fc.onRead = func(i int64, b []byte) (int, error) {
		n, err := fc.Conn.Read(b)
		if i == 1 {
			close(read)
			<-gate // the reply is read; the reader is held before it frames it
		}
		return n, err
	}
	p := dialPipe(t, n.Addr, fc, 0, false)
	b := incrBatch(1)
	done := sendAwait(p, b)
	finishes(t, "the reply to be read", read)
	p.Close()
	close(gate)
	finishes(t, "b", done)
	if got := string(b.Reply(0)); got != ":1\r\n" {
		t.Errorf("b: %q, want the server's reply (it was read before the close)", got)
	}
	waitDead(t, p)
	if err := p.Failed(); !errors.Is(err, ErrLost) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("failed() = %v, want the close", err)
	}
}

// BenchmarkPipeRoundTrip measures one GET's round trip on one shared pipe
// (send, then await: a session's path at pipeline 1) from 1, 4 and 16
// goroutines at once, against the same GET on a plain connection of each
// goroutine's own, framed by the same reader, in alternating chunks of the
// same run. It reports the pipe's ns and heap allocations per round trip,
// the direct ns, and their ratio (x-direct: the pipe adds x-direct - 1).
func BenchmarkPipeRoundTrip(b *testing.B) {
	n := node.StartT(b, node.Options{Role: node.Bare})
	if _, err := node.RawDo(n.Addr, "SET", "bench", "0123456789"); err != nil {
		b.Fatal(err)
	}
	req := resp.AppendCommand(nil, "GET", "bench")
	for _, clients := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			nc := benchDial(b, n.Addr)
			p := New(nc, bufio.NewReaderSize(nc, ReadBufSize), Options{Name: "node", Timeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
			p.clients = new(atomic.Int64)
			p.clients.Store(int64(clients)) // as the server counts its clients (spinFor)
			defer p.Close()
			batches := make([]*Batch, clients)
			direct := make([]net.Conn, clients)
			framers := make([]resp.Reader, clients)
			replies := make([][]byte, clients)
			for i := range clients {
				batches[i] = NewBatch()
				direct[i] = benchDial(b, n.Addr)
				framers[i] = resp.NewReader(bufio.NewReader(direct[i]))
			}
			viaPipe := func(i int) error {
				bt := batches[i]
				bt.Reset()
				bt.Out = append(bt.Out, req...)
				bt.N, bt.Max = 1, 1<<20
				if err := p.Send(bt); err != nil {
					return err
				}
				p.Await(bt)
				if bt.Lost {
					return p.Failed()
				}
				return nil
			}
			viaDirect := func(i int) (err error) {
				if _, err = direct[i].Write(req); err == nil {
					replies[i], _, err = framers[i].Read(replies[i][:0], -1)
				}
				return err
			}
			var tPipe, tDirect time.Duration
			var mallocs uint64
			var ms runtime.MemStats
			const chunk = 512
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				ops := min(chunk, b.N-done)
				tDirect += fanOut(b, clients, ops, viaDirect)
				runtime.ReadMemStats(&ms)
				before := ms.Mallocs
				tPipe += fanOut(b, clients, ops, viaPipe)
				runtime.ReadMemStats(&ms)
				mallocs += ms.Mallocs - before
			}
			b.StopTimer()
			b.ReportMetric(float64(tPipe.Nanoseconds())/float64(b.N), "pipe-ns/op")
			b.ReportMetric(float64(tDirect.Nanoseconds())/float64(b.N), "direct-ns/op")
			b.ReportMetric(float64(tPipe)/float64(tDirect), "x-direct")
			b.ReportMetric(float64(mallocs)/float64(b.N), "pipe-allocs/op")
		})
	}
}

// benchDial opens a TCP connection to addr for a benchmark, closed at its
// end.
func benchDial(b *testing.B, addr string) net.Conn {
	b.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	_ = nc.(*net.TCPConn).SetNoDelay(true)
	b.Cleanup(func() { _ = nc.Close() })
	return nc
}

// fanOut runs ops calls of f spread over clients goroutines (f gets the
// goroutine's index) and returns how long they took.
func fanOut(b *testing.B, clients, ops int, f func(i int) error) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for k := i; k < ops; k += clients {
				if err := f(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// TestPipeSendOnABrokenPipeSaysUnsent: a send on a pipe the server closed
// while idle fails with ErrUnsent, whether Send finds the close itself or
// the idle watch (CheckIdle) found it before: the caller may send the
// batch on the replacement, since none of it was written.
func TestPipeSendOnABrokenPipeSaysUnsent(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprintf("watched=%v", watched), func(t *testing.T) {
			n := pipeNode(t, node.Redis())
			fc := &faultConn{}
			p := dialPipe(t, n.Addr, fc, 0, false)
			b := incrBatch(1)
			finishes(t, "the first batch", sendAwait(p, b))
			if _, err := node.RawDo(n.Addr, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
				t.Fatal(err)
			}
			if watched {
				deadline := time.Now().Add(testTimeout)
				for p.Failed() == nil && time.Now().Before(deadline) {
					p.CheckIdle()
					time.Sleep(5 * time.Millisecond)
				}
				if p.Failed() == nil {
					t.Fatal("the idle check never found the close")
				}
			}
			writes := fc.writes.Load()
			err := p.Send(incrBatch(1))
			if !errors.Is(err, ErrUnsent) || !errors.Is(err, ErrLost) && !errors.Is(err, ErrIdleClosed) {
				t.Errorf("Send on the closed pipe: %v, want ErrUnsent", err)
			}
			if w := fc.writes.Load(); w != writes {
				t.Errorf("%d writes after the close, want none", w-writes)
			}
		})
	}
}
