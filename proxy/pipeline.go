package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"time"
)

// batch is one client's forwarded commands: their encoded bytes and the
// replies they collect. The session owns it except between send and done:
// then only the pipelined connection touches it.
type batch struct {
	out []byte // the encoded commands, as they go to the upstream
	n   int    // how many replies the commands produce

	replies []byte // the replies' exact bytes, concatenated
	ends    []int  // ends[i] is where reply i ends in replies
	max     int    // cap on len(replies); past it the rest is discarded
	over    bool   // the cap was hit; the client is closed
	lost    bool   // some replies are errors made by the proxy

	done chan struct{} // signalled once when all n replies are there
}

// newBatch returns an empty batch with its signal channel.
func newBatch() *batch { return &batch{done: make(chan struct{}, 1)} }

// reset empties the batch for reuse, keeping its buffers.
func (b *batch) reset() {
	b.out = b.out[:0]
	b.n = 0
	b.replies = b.replies[:0]
	b.ends = b.ends[:0]
	b.over, b.lost = false, false
}

// reply returns the bytes of reply i.
func (b *batch) reply(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.replies[start:b.ends[i]]
}

// fill answers every missing reply with msg (a complete RESP error).
func (b *batch) fill(msg []byte) {
	for len(b.ends) < b.n {
		if !b.over {
			b.replies = append(b.replies, msg...)
		}
		b.ends = append(b.ends, len(b.replies))
	}
	b.lost = true
}

// signal wakes the session waiting on the batch.
func (b *batch) signal() { b.done <- struct{}{} }

// pipe is one pipelined upstream connection: a writer goroutine coalesces
// the batches of every client into as few writes as possible, a reader
// goroutine frames the replies and hands them to the batches in FIFO order.
//
// When the connection breaks or a reply is overdue, every batch waiting on
// it gets, for each unanswered command, an explicit error; nothing is ever
// resent.
type pipe struct {
	name    string
	nc      net.Conn
	rr      replyReader
	timeout time.Duration // reply timeout; 0 = none
	lostMsg []byte        // the error a command in flight gets on failure
	onDead  func(err error)

	mu       sync.Mutex
	queue    []*batch // waiting to be written
	spare    []*batch // the writer's swap buffer (writer only)
	inflight []*batch // written (or being written), waiting for replies
	head     int      // first waiting batch in inflight
	closed   bool
	err      error     // why it closed
	rdl      time.Time // the read deadline last set; zero = none (deadline.go)
	wdl      time.Time // the write deadline last set (writer only)

	wake       chan struct{}
	quit       chan struct{}
	writerDone chan struct{}
	dead       chan struct{} // closed after every waiting batch was answered
}

// readBufSize is the upstream reader's buffer: large, so many replies are
// framed per read syscall.
const readBufSize = 256 * 1024

// newPipe starts the goroutines of a pipelined connection over nc, whose
// reader br may already hold buffered bytes.
func newPipe(name string, nc net.Conn, br *bufio.Reader, timeout time.Duration, onDead func(error)) *pipe {
	p := &pipe{
		name:       name,
		nc:         nc,
		timeout:    timeout,
		lostMsg:    []byte("-UPSTREAM connection to " + name + " lost; the command may have been applied\r\n"),
		onDead:     onDead,
		wake:       make(chan struct{}, 1),
		quit:       make(chan struct{}),
		writerDone: make(chan struct{}),
		dead:       make(chan struct{}),
	}
	p.rr = replyReader{br: br}
	if timeout > 0 {
		p.rr.progress = func() {
			p.mu.Lock()
			p.rdl = refreshDeadline(p.nc.SetReadDeadline, time.Time{}, p.timeout)
			p.mu.Unlock()
		}
	}
	go p.writeLoop()
	go p.readLoop()
	return p
}

// send queues b for writing. It fails when the connection is closed.
func (p *pipe) send(b *batch) error {
	p.mu.Lock()
	if p.closed {
		err := p.err
		p.mu.Unlock()
		return err
	}
	p.queue = append(p.queue, b)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// close breaks the connection; waiting batches get the lost error.
func (p *pipe) close() { _ = p.nc.Close() }

// writeLoop writes queued batches, as many per write as are queued.
func (p *pipe) writeLoop() {
	defer close(p.writerDone)
	var vec [][]byte
	for {
		select {
		case <-p.wake:
		case <-p.quit:
			return
		}
		// Let the other client goroutines woken by the same poll enqueue
		// their batches first: measured 6-8 batches per write instead of
		// ~1.5, and the server then sees pipelined input.
		runtime.Gosched()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		q := p.queue
		p.queue = p.spare[:0]
		if p.timeout > 0 && (len(p.inflight) == p.head || p.rdl.IsZero()) {
			p.rdl = refreshDeadline(p.nc.SetReadDeadline, p.rdl, p.timeout)
		}
		p.inflight = append(p.inflight, q...)
		p.mu.Unlock()

		vec = vec[:0]
		for _, b := range q {
			vec = append(vec, b.out)
		}
		if p.timeout > 0 {
			p.wdl = refreshDeadline(p.nc.SetWriteDeadline, p.wdl, p.timeout)
		}
		bufs := net.Buffers(vec)
		_, err := bufs.WriteTo(p.nc)
		clear(q)
		p.spare = q[:0]
		clear(vec)
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
			_ = p.nc.Close() // the reader sees it and tears down
			return
		}
	}
}

// front returns the oldest batch waiting for replies, or nil.
func (p *pipe) front() *batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.inflight) {
		return nil
	}
	return p.inflight[p.head]
}

// pop removes the oldest batch once it has all its replies, and pushes
// the read deadline on after that progress (lazily, see refreshDeadline).
// When nothing waits the deadline is left armed: if it passes while the
// connection is idle, the reader clears it (idleTimeout).
func (p *pipe) pop() {
	p.mu.Lock()
	p.inflight[p.head] = nil
	p.head++
	if p.head == len(p.inflight) {
		p.inflight = p.inflight[:0]
		p.head = 0
	} else {
		if p.head > 1024 && p.head > len(p.inflight)/2 {
			n := copy(p.inflight, p.inflight[p.head:])
			clear(p.inflight[n:])
			p.inflight = p.inflight[:n]
			p.head = 0
		}
		if p.timeout > 0 {
			p.rdl = refreshDeadline(p.nc.SetReadDeadline, p.rdl, p.timeout)
		}
	}
	p.mu.Unlock()
}

// idleTimeout reports whether a read deadline that passed while the reader
// waited for the next reply is no timeout: nothing was waiting (the
// deadline is then cleared), or a write since set a deadline still ahead.
func (p *pipe) idleTimeout() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.inflight) {
		p.rdl = time.Time{}
		_ = p.nc.SetReadDeadline(time.Time{})
		return true
	}
	return p.rdl.After(time.Now())
}

// readLoop frames replies and completes batches in FIFO order until the
// connection fails, then tears it down.
func (p *pipe) readLoop() {
	var err error
	for {
		if _, err = p.rr.br.Peek(1); err != nil {
			if p.timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) && p.idleTimeout() {
				continue
			}
			break
		}
		b := p.front()
		if b == nil {
			err = fmt.Errorf("%w: a reply nothing waited for", ErrUpstreamProtocol)
			break
		}
		for len(b.ends) < b.n {
			var over bool
			b.replies, over, err = p.rr.read(b.replies, b.max)
			if err != nil {
				break
			}
			b.over = b.over || over
			b.ends = append(b.ends, len(b.replies))
		}
		if err != nil {
			break
		}
		p.pop()
		b.signal()
	}
	p.teardown(err)
}

// teardown closes the connection, waits for the writer, and answers every
// waiting batch with an explicit error.
func (p *pipe) teardown(err error) {
	p.mu.Lock()
	if p.err != nil {
		err = p.err // the writer saw it first
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		err = ErrTimeout
	} else if err != nil && !errors.Is(err, ErrUpstreamProtocol) {
		err = errors.Join(ErrLost, err)
	}
	p.err = err
	p.closed = true
	p.mu.Unlock()
	_ = p.nc.Close()
	close(p.quit)
	<-p.writerDone

	p.mu.Lock()
	inflight := p.inflight[p.head:]
	queued := p.queue
	p.inflight, p.queue, p.head = nil, nil, 0
	p.mu.Unlock()
	for _, b := range inflight {
		b.fill(p.lostMsg)
		b.signal()
	}
	unsent := unavailableReply(p.name, err.Error())
	for _, b := range queued {
		b.fill(unsent)
		b.signal()
	}
	close(p.dead)
	if p.onDead != nil {
		p.onDead(err)
	}
}

// failed reports the error that closed the connection, or nil while it is open.
func (p *pipe) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		return nil
	}
	return p.err
}

// oneLine makes s safe to put in a RESP error line.
func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}
