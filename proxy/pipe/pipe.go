package pipe

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/deadline"
	"github.com/emqproxy/emqproxy/resp"
)

// Pipe is one pipelined upstream connection. Batches are written in the
// order they are sent and completed in that order.
//
// # Roles
//
// Two roles move the bytes; each is held by one goroutine at most, and
// both are taken and left under mu:
//
//   - The writer (writing) alone writes nc. A send that finds no writer
//     takes the role and writes its batch itself, with every batch queued
//     by then, and goes on writing what others queue meanwhile (combining:
//     the batches of many clients leave in one write, and the server reads
//     them as one pipeline); after Options.MaxCombinedWrites writes it
//     hands the rest to a goroutine of its own (writeQueued). A send that finds a
//     writer queues its batch: the writer takes it along. Batches with a
//     WAIT wait in the queue while another WAIT is in flight (read.go,
//     "held"); the reader that reads its reply takes the role to write them.
//   - The reader (reading) alone reads nc (rr), takes batches off inflight
//     and completes them, in FIFO order, waking their sessions (sigDone).
//     On a shared connection it is held inline by a session: one that
//     awaits its batch while nobody reads takes the role (lead), reads
//     until its own batch is complete, goes on with the batches whose
//     replies are already buffered (no system call, no wait), then hands
//     the role on (handOff). The owner of the oldest batch waiting may be
//     handed the role through its batch's channel (sigLead): it then leads.
//     On a bg connection the reader goroutine (readLoop) holds the role for
//     the connection's life.
//
// A shared connection has no goroutines of its own: a round trip of a lone
// client through the proxy then costs what it costs a client talking to the
// server directly (its session writes the batch and reads the replies
// itself, and no goroutine is woken on the way; each hand-off between
// goroutines costs a wake-up, tens of microseconds on a busy 2-core
// machine, which at pipeline 1 is most of what a proxy adds). Under load
// the same two roles batch many clients' commands. A dedicated connection
// (blocking commands, WATCH) and a TLS one keep the reader goroutine: a
// blocking command's session must watch its client meanwhile, and on TLS a
// peek at the socket cannot tell a close from a record the server sends on
// its own (a session ticket).
//
// # Invariants
//
//  1. A sent batch is in the queue (not written yet), in inflight (written,
//     or being written, and waiting for replies), or finished; only the
//     holder of the reader's role finishes it. Until then its session
//     writes it (in the writer's role), waits on done, or reads.
//  2. Nobody waits with nobody to read: while a batch is in inflight or the
//     queue, the reader's role is held (by a reader, by a session being
//     handed it, or by the teardown), or a writer holds its role, and a
//     writer that leaves its role while nobody reads takes the reader's
//     role and hands it on.
//  3. A batch's channel gets at most one sigLead, then one sigDone: never a
//     signal it is not waiting for. A handed role is picked up when the
//     batch's session awaits that batch. A session with batches on several
//     pipes (a routed split, package segment) sends them all, in one order,
//     before it awaits any, and awaits them in that order; so a role
//     handed to one of its later batches waits at most until its earlier
//     ones complete, and no cycle of such waits can form (each waits on a
//     batch sent before the one it holds up). Whoever changes that order
//     must keep this.
//  4. The first failure (a write or read error, a reply or write timeout, a
//     close, an idle connection found closed) is recorded in err under mu
//     (breakLocked), before the socket is closed; from then on the Pipe is
//     broken and nothing more is written. Only the holder of the reader's
//     role tears down, once, after the writer has left its role: no reply
//     is framed while batches get errors.
//  5. A batch is handed back to its session only once its bytes are no
//     longer read: normally its last reply shows they all left (the write
//     call may not have returned yet, but a plain TCP connection's vector
//     goes to the kernel by writev, which reads no chunk it has written,
//     and TLS encrypts a chunk before it sends it); in a teardown, after
//     the writer has left its role.
//
// # Exits
//
// Every way out of the reader's role is handOff: broken, it tears down
// (teardown: every batch written and waiting gets, for each unanswered
// command, lostMsg, "may have been applied", in FIFO order; every batch
// still queued gets the unavailable error: it was never written; nothing is
// ever resent); otherwise, while a batch waits in inflight, the role goes to
// its owner (sigLead); otherwise it is dropped (a writer still writing takes
// it when it leaves, per 2). The exits that reach it: the reader's own batch
// complete (lead); a read error or a reply timeout (lead, readLoop, via
// release); the writer leaving its role, after its last write or a failed
// one, while nobody reads (leaveWriterLocked); close, from any goroutine,
// while nobody reads (while somebody does, that one sees the break: on the
// closed socket, or in handOff); an idle connection found closed
// (tearIdleLocked).
//
// While nothing waits, nobody reads, so a connection the server closed
// shows only on the next send: send checks an idle connection without
// blocking first (CheckIdle, one non-blocking peek), and the upstream's
// watch does so every watchInterval, so a command is never written to a
// connection known to be closed and the reconnect starts at once.
//
// # Deadlines
//
// The reply timeout (Options.Timeout on a shared connection, none
// on a dedicated one: a blocking command waits as long as it asks) bounds
// how long a batch may wait with no reply coming; the write timeout (the
// same Options.Timeout, on every connection, dedicated ones
// included) bounds each write, so no writer (a session, on a dedicated
// connection too) hangs on a server that stopped reading: the write fails
// and its batch gets the lost error. Both are set lazily (proxy/deadline).
type Pipe struct {
	name     string
	nc       net.Conn
	raw      syscall.RawConn // the socket, for CheckIdle (nil with bg)
	pk       *peeker         // looks at raw (idle.go)
	bg       bool            // a reader goroutine reads
	rr       resp.Reader
	timeout  time.Duration // reply timeout; 0 = none
	wtimeout time.Duration // write timeout; 0 = none
	lostMsg  []byte        // the error a command in flight gets on failure
	onDead   func(err error)
	addr     string       // the address it was dialed at (failover.go)
	onErr    func([]byte) // sees each top-level error reply (failover.go); nil: none

	mu       sync.Mutex
	queue    []*Batch    // waiting to be written
	spare    []*Batch    // the writer's swap buffer (writer only)
	inflight []*Batch    // written (or being written), waiting for replies
	head     int         // first waiting batch in inflight
	writing  bool        // the writer's role is held
	waitOut  bool        // a WAIT is written and its reply not read (held)
	reading  bool        // the reader's role is held (or being handed over)
	idle     sync.Cond   // broadcast when the writer's role is left (on mu)
	err      error       // the first failure; set: broken (breakLocked)
	rdl      time.Time   // the read deadline last set; zero = none (proxy/deadline)
	wdl      time.Time   // the write deadline last set (writer only)
	vec      net.Buffers // the writer's vector of batch buffers (writer only)
	bufs     net.Buffers // vec as WriteTo consumes it (a local would escape: an allocation a write)

	dead chan struct{} // closed after every waiting batch was answered

	// clients is the server's count of client connections (spinFor);
	// nil: no spin.
	clients *atomic.Int64
	// maxWrites is Options.MaxCombinedWrites, its default applied.
	maxWrites int
}

// ReadBufSize is the size of the buffered reader to give New: large, so
// many replies are framed per read syscall.
const ReadBufSize = 256 * 1024

// DefaultMaxCombinedWrites bounds the writes a session makes in the
// writer's role before it hands the rest of the queue to a goroutine and
// goes back to its own client (Options.MaxCombinedWrites).
const DefaultMaxCombinedWrites = 4

// errUnasked is the failure of a reply that no batch waits for.
var errUnasked = fmt.Errorf("%w: a reply nothing waited for", ErrProtocol)

// Options are what a Pipe is told when it is made.
type Options struct {
	Name         string        // the upstream's name, in the errors its batches get
	Addr         string        // the address it was dialed at (Addr; a Sentinel upstream's failover)
	Timeout      time.Duration // reply timeout; 0: none (a dedicated connection's)
	WriteTimeout time.Duration // write timeout; 0: none
	// OnDead is called once the connection is torn down, with its failure.
	OnDead func(err error)
	// OnError sees each top-level error reply (a Sentinel upstream's
	// failover watches for -READONLY); nil: none.
	OnError func([]byte)
	// Background gives the connection a reader goroutine (a dedicated
	// connection's); a TLS connection always gets one.
	Background bool
	// Clients is the server's count of client connections (spinFor); nil:
	// no spin.
	Clients *atomic.Int64
	// MaxCombinedWrites is how many writes a session makes in the writer's
	// role before it hands the role to the connection's own writer
	// goroutine (0: DefaultMaxCombinedWrites); tests make it 1 so the
	// hand-over happens all the time.
	MaxCombinedWrites int
}

// New sets up a pipelined connection over nc, whose reader br may already
// hold buffered bytes.
func New(nc net.Conn, br *bufio.Reader, o Options) *Pipe {
	name, timeout, bg := o.Name, o.Timeout, o.Background
	p := &Pipe{
		name:     name,
		nc:       nc,
		timeout:  timeout,
		wtimeout: o.WriteTimeout,
		lostMsg:  clienterr.Reply(lost(name)),
		onDead:   o.OnDead,
		addr:     o.Addr,
		onErr:    o.OnError,
		clients:  o.Clients,
		dead:     make(chan struct{}),
	}
	p.maxWrites = o.MaxCombinedWrites
	if p.maxWrites <= 0 {
		p.maxWrites = DefaultMaxCombinedWrites
	}
	p.idle.L = &p.mu
	p.rr = resp.NewReader(br)
	if timeout > 0 {
		p.rr.Progress = func() {
			p.mu.Lock()
			p.rdl = deadline.Refresh(p.nc.SetReadDeadline, time.Time{}, p.timeout)
			p.mu.Unlock()
		}
	}
	if _, isTLS := nc.(*tls.Conn); !bg && !isTLS {
		if sc, ok := nc.(syscall.Conn); ok {
			p.raw, _ = sc.SyscallConn()
			p.pk = newPeeker()
		}
	}
	p.bg = p.raw == nil
	if p.bg {
		p.reading = true // for the connection's life
		go p.readLoop()
	}
	return p
}

// Send queues b and sees it written: when no write is in progress the
// caller writes it itself (with whatever else is queued by then) before
// Send returns; otherwise the write in progress takes it along. The caller
// must then await b. It fails, with nothing written (ErrUnsent), when the
// connection is broken: found so by Send (ErrIdleClosed), or before it (by
// the idle watch, or with other batches in flight: the pipe's error).
func (p *Pipe) Send(b *Batch) error {
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrUnsent, err)
	}
	if err := p.tearIdleLocked(); err != nil {
		return fmt.Errorf("%w: %w: %w", ErrUnsent, ErrIdleClosed, err)
	}
	p.queue = append(p.queue, b)
	if p.writing {
		p.mu.Unlock()
		return nil
	}
	p.writing = true
	p.mu.Unlock()
	p.writeQueued(p.maxWrites)
	return nil
}

// Close breaks the connection from any goroutine; every waiting batch gets
// its error (see pipe, "Exits").
func (p *Pipe) Close() {
	p.mu.Lock()
	p.breakLocked(net.ErrClosed)
	if p.reading {
		p.mu.Unlock()
		_ = p.nc.Close() // the reader sees the break: on the socket, or in handOff
		return
	}
	p.reading = true
	p.handOffLocked()
}

// breakLocked records err as the pipe's failure, unless one is recorded
// already (the first one is the cause): a timeout as ErrTimeout, anything
// but a protocol error as ErrLost. The caller holds mu.
func (p *Pipe) breakLocked(err error) {
	if p.err != nil || err == nil {
		return
	}
	switch {
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrProtocol), errors.Is(err, ErrLost):
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = ErrTimeout
	default:
		err = errors.Join(ErrLost, err)
	}
	p.err = err
}

// handOffLocked leaves the reader's role, which the caller holds: the one
// way every exit leaves it (see pipe, "Exits"). Broken, it tears down;
// otherwise it hands the role to the owner of the oldest batch waiting, or
// drops it when none waits. It is called with mu held and returns with mu
// released.
func (p *Pipe) handOffLocked() {
	if p.err != nil {
		p.mu.Unlock()
		p.teardown()
		return
	}
	if p.head < len(p.inflight) {
		next := p.inflight[p.head]
		p.mu.Unlock()
		next.Done <- sigLead
		return
	}
	p.reading = false
	p.mu.Unlock()
}

// release leaves the reader's role on a read error or a reply timeout: the
// pipe breaks (err, unless a failure came first) and handOff tears it down.
func (p *Pipe) release(err error) {
	p.mu.Lock()
	p.breakLocked(err)
	p.handOffLocked()
}

// leaveWriterLocked leaves the writer's role. The batches it took along may
// wait with nobody reading (the reader dropped its role while they were
// still queued, or this writer is writeQueued's goroutine, which awaits
// nothing): then it takes the reader's role and hands it on, to the owner
// of the oldest, or (broken) to the teardown. It is called with mu held
// and returns with mu released.
func (p *Pipe) leaveWriterLocked() {
	p.writing = false
	p.idle.Broadcast()
	if p.reading {
		p.mu.Unlock()
		return
	}
	p.reading = true
	p.handOffLocked()
}

// writeQueued writes the queue, as many batches per write as are queued,
// until it is empty, the connection breaks, or limit writes were made (then
// a goroutine takes over the writer's role, so a session is not kept from
// its own client by other clients' batches; limit < 0: no limit). The
// caller holds the writer's role; it leaves it through leaveWriterLocked.
func (p *Pipe) writeQueued(limit int) {
	// Let the other client goroutines woken by the same poll enqueue
	// their batches first: measured 6-8 batches per write instead of
	// ~1.5, and the server then sees pipelined input. With a lone client
	// nothing else is runnable and this returns at once.
	runtime.Gosched()
	for n := 0; ; n++ {
		p.mu.Lock()
		if p.err != nil || len(p.queue) == 0 {
			p.leaveWriterLocked()
			return
		}
		if n == limit {
			p.mu.Unlock()
			go p.writeQueued(-1) // the role passes to it
			return
		}
		if p.waitOut && holdsWait(p.queue) {
			// Held until the WAIT in flight is answered (read.go, held).
			p.leaveWriterLocked()
			return
		}
		q := p.queue
		p.queue = p.spare[:0]
		if p.timeout > 0 && (len(p.inflight) == p.head || p.rdl.IsZero()) {
			p.rdl = deadline.Refresh(p.nc.SetReadDeadline, p.rdl, p.timeout)
		}
		if oneWait(q) { // read.go: one WAIT a write, before a reader sees them
			p.waitOut = true
		}
		p.inflight = append(p.inflight, q...)
		p.mu.Unlock()

		vec := p.vec[:0]
		for _, b := range q {
			vec = b.appendTo(vec)
		}
		if p.wtimeout > 0 {
			p.wdl = deadline.Refresh(p.nc.SetWriteDeadline, p.wdl, p.wtimeout)
		}
		p.bufs = vec // WriteTo consumes its receiver
		_, err := p.bufs.WriteTo(p.nc)
		p.bufs = nil
		clear(vec)
		p.vec = vec[:0]
		clear(q)
		p.mu.Lock()
		p.spare = q[:0]
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("%w: the server read nothing for %v", ErrTimeout, p.wtimeout)
			}
			p.breakLocked(err)
		}
		p.mu.Unlock()
		if err != nil {
			_ = p.nc.Close() // a reader waiting on the socket sees the break
		}
	}
}

// Await waits until b, sent on p, has all its replies, reading them itself
// when nobody else is (see pipe).
func (p *Pipe) Await(b *Batch) {
	if p.bg {
		<-b.Done
		return
	}
	p.mu.Lock()
	if b.finished || p.reading {
		p.mu.Unlock()
		if <-b.Done == sigDone {
			return
		}
	} else {
		p.reading = true
		p.mu.Unlock()
	}
	p.lead(b)
}

// lead reads replies in the reader's role until own is complete,
// completing every batch before it. Then it goes on completing the batches
// whose replies are already read (no system call, no wait), and hands the
// role on only when the next batch's replies must be waited for: handing
// the role on costs a wake-up, and under load one read often holds the
// replies of many batches. On a failure the teardown answers own too.
func (p *Pipe) lead(own *Batch) {
	ownDone := false
	for {
		if ownDone {
			p.mu.Lock()
			if p.head == len(p.inflight) || !p.rr.HasReplies(p.inflight[p.head].onWire()-len(p.inflight[p.head].Ends)) {
				p.handOffLocked()
				return
			}
			p.mu.Unlock()
		} else {
			p.spinFor(own)
			// own may still be queued behind another session's write:
			// the first reply bytes show it was moved to inflight.
			if err := p.waitReply(); err != nil {
				p.release(err)
				<-own.Done
				return
			}
		}
		b := p.front()
		err := errUnasked
		if b != nil {
			err = p.readBatch(b)
		}
		if err != nil {
			p.release(err)
			if !ownDone {
				<-own.Done
			}
			return
		}
		p.advance() // read.go: pops b, writes what was held behind its WAIT
		if p.complete(b, own) {
			ownDone = true
		}
	}
}

// teardown closes the connection, waits for the writer to leave its role,
// and answers every waiting batch with an explicit error, in FIFO order:
// those written with lostMsg, those still queued with the unavailable
// error. The caller holds the reader's role (handOffLocked), for good; the
// failure is recorded (breakLocked).
func (p *Pipe) teardown() {
	_ = p.nc.Close()

	// A batch being written may not be handed back before the write ends:
	// its session would reuse the buffer under the write. The close above
	// ends the write at once.
	p.mu.Lock()
	for p.writing {
		p.idle.Wait()
	}
	err := p.err
	inflight := p.inflight[p.head:]
	queued := p.queue
	p.inflight, p.queue, p.head = nil, nil, 0
	for _, b := range inflight {
		b.finished = true
	}
	for _, b := range queued {
		b.finished = true
	}
	p.mu.Unlock()
	for _, b := range inflight {
		for _, r := range b.riders { // read, waiting for b's WAIT (ack.go)
			r.FillLost(p.lostMsg)
			r.signal()
		}
		clear(b.riders)
		b.riders = b.riders[:0]
		b.FillLost(p.lostMsg)
		b.signal()
	}
	unsent := clienterr.Reply(Unavailable(p.name, err.Error(), err))
	for _, b := range queued {
		b.Fill(unsent)
		b.signal()
	}
	close(p.dead)
	if p.onDead != nil {
		p.onDead(err)
	}
}

// Addr is the address the connection was dialed at.
func (p *Pipe) Addr() string { return p.addr }

// Dead is closed once the connection is torn down and every batch that
// waited on it was answered.
func (p *Pipe) Dead() <-chan struct{} { return p.dead }

// Failed reports the failure that broke the connection, or nil while it
// works.
func (p *Pipe) Failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
