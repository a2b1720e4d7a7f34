package conn

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/emqproxy/emqproxy/proxy/deadline"
	"github.com/emqproxy/emqproxy/resp"
)

// The output: the replies ready to write (Out), the bytes of it past the
// free ones held of the memory budget, written to the client in one write
// under the write deadline.

// HoldOutput takes from the budget the bytes of Out past the free ones
// (replies copied there from their batches, whose bytes are released
// right after), without waiting: they are already read.
func (c *Conn) HoldOutput() {
	if want := int64(len(c.Out) - resp.FreeReplyBytes); want > c.outHeld {
		c.opt.Mem.Force(want - c.outHeld)
		c.outHeld = want
	}
}

// Adopt makes replies the output, with what they hold of the budget
// (held), and returns the old output's array, emptied, for reuse: a
// batch's replies that are the output as they are, not copied.
func (c *Conn) Adopt(replies []byte, held int64) []byte {
	old := c.Out[:0]
	c.Out = replies
	c.outHeld += held
	return old
}

// ReleaseOutput gives back the output's bytes once they are written, and
// also, the session's bytes that were held until then (a transaction's,
// sent at EXEC), at once.
func (c *Conn) ReleaseOutput(also int64) {
	c.opt.Mem.Give(c.outHeld + also)
	c.outHeld = 0
}

// Release gives back everything the Conn holds of the budget, and also,
// the session's other bytes, at once (the session ends).
func (c *Conn) Release(also int64) {
	c.opt.Mem.Give(c.inHeld + c.outHeld + also)
	c.inHeld, c.outHeld = 0, 0
}

// Write writes Out to the client in one write, under the write deadline,
// and empties it. It returns how long the write took (a slow reader's
// share of the shared connections is judged by it).
func (c *Conn) Write() (took time.Duration, err error) {
	c.wdl = deadline.Refresh(c.nc.SetWriteDeadline, c.wdl, c.opt.WriteTimeout)
	began := time.Now()
	n, err := c.nc.Write(c.Out)
	took = time.Since(began)
	c.opt.BytesOut.Add(float64(n))
	if cap(c.Out) > 4*resp.DefaultMaxInline && len(c.Out) > 0 {
		c.Out = nil // do not keep a big reply buffer around
	} else {
		c.Out = c.Out[:0]
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A client that does not read: reset rather than leave the
		// unsent replies to the kernel (up to its send buffer per
		// closed socket) until the client reads them or it gives up.
		if tc, ok := c.nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	return took, err
}

// WriteError writes an error's reply before the client is closed (then
// Linger), under the write deadline; it is not counted in BytesOut, nor
// taken from Out.
func (c *Conn) WriteError(reply []byte) error {
	c.wdl = deadline.Refresh(c.nc.SetWriteDeadline, c.wdl, c.opt.WriteTimeout)
	_, err := c.nc.Write(reply)
	return err
}
