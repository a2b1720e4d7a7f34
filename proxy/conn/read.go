package conn

import (
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/emqproxy/emqproxy/resp"
)

// The client's input: the read buffer, grown for what a command needs and
// shrunk back (InitialReadBuf, keptReadBuf), its bytes taken from the
// memory budget (resize), and framed in place (Next).

// QueryBufferError is Room's error when a command does not fit in
// Options.MaxQueryBuffer: the client is closed.
type QueryBufferError struct {
	Bytes int // the read buffer's size, full with part of one command
}

func (e *QueryBufferError) Error() string {
	return "command over the query buffer limit (" + strconv.Itoa(e.Bytes) + " bytes buffered)"
}

// TooLargeError is Room's error when a command needs more room than the
// whole memory budget: the client is answered and closed.
type TooLargeError struct {
	Need   int   // the read buffer's size the command needs
	Budget int64 // the budget's limit
}

func (e *TooLargeError) Error() string {
	return "command larger than the memory budget (it needs " + strconv.Itoa(e.Need) + " bytes; the budget is " + strconv.FormatInt(e.Budget, 10) + ")"
}

// clientRead is a read of the client's connection in a goroutine of its
// own, for a session that waits for its client and for something else at
// once: subscribe mode (the server's pushes, a leg's failure) and a blocking
// command on a connection of the client's own (its reply). While one is out,
// buf[end:] is the reader's, and the session neither frames nor moves the
// buffer.
type clientRead struct {
	out  bool
	done chan ReadResult
}

// ReadResult is what a client read got (ReadAsync).
type ReadResult struct {
	n   int
	err error
}

// Reset starts framing anew: the frames framed so far point into the
// buffer, which may move after them, and what an incomplete command was
// known to need is read again.
func (c *Conn) Reset() {
	c.fr.Reset()
	c.need = 0
}

// SetUnauthenticated sets whether the commands framed next are an
// unauthenticated client's (resp.Limits.Unauthenticated).
func (c *Conn) SetUnauthenticated(u bool) { c.fr.Limits.Unauthenticated = u }

// Next frames the next command in the buffer, passing over what the
// framer skips: a framed command is taken (its bytes stay in the buffer,
// the frame's slices point into them, until the next read); an incomplete
// one is left for more bytes, noting what it is known to need; an invalid
// one is left with the error reply the client gets.
func (c *Conn) Next() (resp.Frame, resp.Status, []byte) {
	for {
		f, status, n, need, errReply := c.fr.Next(c.buf[c.start:c.end])
		switch status {
		case resp.Skipped:
			c.start += n
			continue
		case resp.Incomplete:
			c.need = need
		case resp.Framed:
			c.start += n
			c.taken = n
		}
		return f, status, errReply
	}
}

// Unread puts back the command Next took last.
func (c *Conn) Unread() { c.start -= c.taken }

// Full reports whether the buffer has no room left to read into.
func (c *Conn) Full() bool { return c.end == len(c.buf) }

// Fill reads more client bytes into the room Room made, under the read
// deadline dl (the zero time: the deadline set before stays). It returns
// the read's error only when it brought no bytes (an error shows again on
// the next read).
func (c *Conn) Fill(dl time.Time) error {
	if !dl.IsZero() {
		_ = c.nc.SetReadDeadline(dl)
	}
	n, err := c.nc.Read(c.buf[c.end:])
	c.opt.BytesIn.Add(float64(n))
	c.readFull = n > 0 && c.end+n == len(c.buf)
	if n < len(c.buf)/4 {
		c.smallReads++
	} else {
		c.smallReads = 0
	}
	c.end += n
	if n > 0 {
		return nil
	}
	return err
}

// Reading reports whether a read ReadAsync started is out.
func (c *Conn) Reading() bool { return c.rd.out }

// ReadAsync starts a client read into the buffer's free room in a
// goroutine of its own (see clientRead), unless one is out already; its
// result comes on Reads, and ReadDone takes it.
func (c *Conn) ReadAsync() {
	if c.rd.out {
		return
	}
	if c.rd.done == nil {
		c.rd.done = make(chan ReadResult, 1)
	}
	c.rd.out = true
	buf, nc, done := c.buf[c.end:], c.nc, c.rd.done
	go func() {
		n, err := nc.Read(buf)
		done <- ReadResult{n, err}
	}()
}

// Reads is where the result of the read ReadAsync started comes.
func (c *Conn) Reads() <-chan ReadResult { return c.rd.done }

// ReadDone takes a client read's result: its bytes join the buffer. It
// returns the read's error only when it brought no bytes (an error shows
// again on the next read).
func (c *Conn) ReadDone(r ReadResult) error {
	c.rd.out = false
	c.end += r.n
	c.opt.BytesIn.Add(float64(r.n))
	if r.n > 0 {
		return nil
	}
	return r.err
}

// StopRead ends an outstanding client read, keeping what it brought; an
// error means the client is gone.
func (c *Conn) StopRead() error {
	if !c.rd.out {
		return nil
	}
	_ = c.nc.SetReadDeadline(time.Now())
	err := c.ReadDone(<-c.rd.done)
	_ = c.nc.SetReadDeadline(time.Time{})
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}

// Room makes room in the read buffer for more client bytes: it moves the
// unread bytes to the front, or grows the buffer (up to MaxQueryBuffer),
// taking the bytes from the memory budget, and waits for them when the
// budget is short: the client is not read from meanwhile. holder: the
// session holds other bytes of the budget for the client's commands (a
// transaction's queued commands), and waits as a holder (resize).
//
// An error ends the session: a QueryBufferError, a TooLargeError, or the
// budget's limits.ErrClosed (the server shuts down).
func (c *Conn) Room(holder bool) error {
	if len(c.buf) > keptReadBuf && c.end-c.start <= InitialReadBuf && c.need <= InitialReadBuf {
		// Shrink back after a big command (what follows it fits the
		// initial buffer), releasing its bytes to the budget.
		if err := c.resize(InitialReadBuf, true, holder); err != nil {
			return err
		}
	}
	if c.start == c.end {
		c.start, c.end = 0, 0
		// Shrink back when the client's reads have become small next to
		// a buffer grown for its pipelines.
		if len(c.buf) > InitialReadBuf && c.smallReads >= shrinkAfter {
			if err := c.resize(InitialReadBuf, true, holder); err != nil {
				return err
			}
		}
	}
	if c.readFull && len(c.buf) < keptReadBuf && int64(len(c.buf)) < c.opt.MaxQueryBuffer {
		// The last read filled the buffer: the client pipelines more than
		// it holds. Double it so the next pipeline arrives in one read
		// (unless the budget is short: the pipeline then takes two).
		c.readFull = false
		if err := c.resize(int(min(int64(2*len(c.buf)), c.opt.MaxQueryBuffer)), false, holder); err != nil {
			return err
		}
	}
	if c.end == len(c.buf) {
		if c.start > 0 {
			c.end = copy(c.buf, c.buf[c.start:c.end])
			c.start = 0
		} else {
			if int64(len(c.buf)) >= c.opt.MaxQueryBuffer {
				return &QueryBufferError{Bytes: len(c.buf)}
			}
			// Grow to what the incomplete command is known to need (the
			// budget holds its size: one allocation, no copies on the
			// way), else geometrically as bytes arrive (a header line,
			// at most MaxInline).
			size := 2 * len(c.buf)
			if c.need > len(c.buf) {
				size = c.need
			}
			size = int(min(int64(size), c.opt.MaxQueryBuffer))
			if err := c.resize(size, true, holder); err != nil {
				return err
			}
		}
	}
	return nil
}

// resize replaces the read buffer by one of size bytes holding its unread
// bytes, taking the bytes past keptReadBuf from the budget first (and
// releasing the old buffer's after). wait: a command needs the room, and
// the session waits for it (as a holder when it holds part of a command or,
// holder, a transaction's queued commands: it must not wait for room it
// holds itself); otherwise (a buffer grown to read a pipeline in one go)
// it is not grown when the budget is short.
// An error ends the session: a command larger than the whole budget
// (TooLargeError), or the budget closed (the server shutting down).
func (c *Conn) resize(size int, wait, holder bool) error {
	mem := c.opt.Mem
	charge := int64(max(size-keptReadBuf, 0))
	if charge > mem.Limit() {
		return &TooLargeError{Need: size, Budget: mem.Limit()}
	}
	if charge > 0 {
		if !wait {
			if !mem.TryTake(charge) {
				return nil
			}
		} else if err := mem.Take(c.opt.ID, charge, c.inHeld > 0 || holder); err != nil {
			return err
		}
	}
	c.fr.Reset() // the last round's frames point into the old buffer
	nb := make([]byte, size)
	c.end = copy(nb, c.buf[c.start:c.end])
	c.start = 0
	c.buf = nb
	mem.Give(c.inHeld)
	c.inHeld = charge
	if charge == 0 {
		mem.Done(c.opt.ID)
	}
	return nil
}

// lingerTimeout is how long a client being closed after an error may go
// on sending the command the error refused (Linger).
const lingerTimeout = 2 * time.Second

// Linger ends our side of the connection after an error was written and
// reads what the client still sends, for at most lingerTimeout, dropping
// it: closing with unread input would reset the connection, and the
// client might never read the error.
func (c *Conn) Linger() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
	for {
		if _, err := c.nc.Read(c.buf); err != nil {
			return
		}
	}
}
