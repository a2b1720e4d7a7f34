package pipe

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// While nothing waits on a shared connection nobody reads it: the idle
// check looks at its socket without blocking, and the lone client's reader
// polls it for a moment before it parks (pipe.go).

// CheckIdle tears the connection down when it is idle and the server has
// closed it (or sent what nobody asked for): package upstream's watch
// calls it every so often.
func (p *Pipe) CheckIdle() {
	p.mu.Lock()
	if p.err != nil || p.tearIdleLocked() == nil {
		p.mu.Unlock()
	}
}

// tearIdleLocked is checkIdleLocked, and on an error the teardown: it is
// called with mu held and returns with mu released when it returns an
// error (nobody reads an idle connection, so the reader's role is free).
func (p *Pipe) tearIdleLocked() error {
	err := p.checkIdleLocked()
	if err == nil {
		return nil
	}
	p.breakLocked(err)
	p.reading = true
	p.handOffLocked()
	return err
}

// checkIdleLocked looks, without blocking, at an idle connection (no
// reader, no writer, nothing queued or waiting): an error when the server
// closed it or sent bytes nobody asked for. Not idle: nil at once.
func (p *Pipe) checkIdleLocked() error {
	if p.raw == nil || p.reading || p.writing || len(p.queue) > 0 || p.head < len(p.inflight) {
		return nil
	}
	if p.rr.Buffered() > 0 {
		return errUnasked
	}
	n, err := p.peek()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The reply deadline left armed after the last reply has passed:
		// nothing waits, so it is no timeout. Clear it (the next write
		// sets a new one) and look again.
		p.rdl = time.Time{}
		_ = p.nc.SetReadDeadline(time.Time{})
		n, err = p.peek()
	}
	switch {
	case err != nil:
		return err
	case n < 0:
		return nil
	case n == 0:
		return errors.New("closed by the server")
	}
	return errUnasked
}

// peeker is a pipe's non-blocking look at its socket. Its callback is made
// once, with the pipe: one made per look would escape to the heap through
// the RawConn, and the lone client's reader looks many times a round trip
// (spinFor). Its fields are used by one goroutine at a time: the idle
// check runs only while nobody holds the reader's role, the spin only in
// it.
type peeker struct {
	fn  func(fd uintptr) bool
	n   int
	err error
	one [1]byte
}

// newPeeker returns the peeker of a socket.
func newPeeker() *peeker {
	pk := &peeker{}
	pk.fn = func(fd uintptr) bool {
		for {
			pk.n, _, pk.err = syscall.Recvfrom(int(fd), pk.one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if pk.err != syscall.EINTR {
				break
			}
		}
		if pk.err == syscall.EAGAIN {
			pk.n, pk.err = -1, nil
		}
		return true // never wait: a peek, not a read
	}
	return pk
}

// peek looks at the socket without blocking or consuming: n < 0 when
// nothing is there yet, 0 when the server closed it, 1 when bytes wait.
func (p *Pipe) peek() (n int, err error) {
	if rerr := p.raw.Read(p.pk.fn); rerr != nil {
		return 0, rerr
	}
	return p.pk.n, p.pk.err
}

// spinWindow is how long a lone waiting session polls its connection for
// the reply before it parks (spinFor).
const spinWindow = 40 * time.Microsecond

// spinFor polls the connection, without blocking, for at most spinWindow
// before the reader parks for own's first reply, while the proxy has a
// single client: a lone client's reply comes back in tens of microseconds,
// and parking costs the runtime's thread going to sleep and being woken
// again (with the runtime's monitor: about four context switches a round
// trip where an epoll loop makes two, each an idle CPU's wake-up), which
// doubles what the hop adds (bench section 1b). With more clients the one
// P has other sessions to run and the reader parks at once: a spin would
// hold them back (measured: 15% fewer GETs at 50 clients).
func (p *Pipe) spinFor(own *Batch) {
	if p.clients == nil || p.raw == nil || p.clients.Load() != 1 || p.rr.Buffered() > 0 || len(own.Ends) > 0 {
		return
	}
	end := time.Now().Add(spinWindow)
	for {
		if n, err := p.peek(); n >= 0 || err != nil || time.Now().After(end) {
			return
		}
	}
}
