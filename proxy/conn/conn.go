package conn

import (
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/resp"
)

// InitialReadBuf is a client's read buffer size. It grows as far as one
// command needs and shrinks back once that command is done; and it doubles,
// up to keptReadBuf, while the client's reads fill it, so a pipeline larger
// than the buffer (16 commands of 1 KiB) is framed and forwarded as one
// batch instead of being split into two round trips to the upstream.
const InitialReadBuf = 16 * 1024

// keptReadBuf is the largest read buffer a Conn keeps between batches;
// a bigger one (grown for one big command) shrinks back once it is empty.
const keptReadBuf = 64 * 1024

// shrinkAfter is how many reads in a row that use under a quarter of a
// grown buffer make it shrink back: enough that a client whose reads vary
// (a pipeline arriving in pieces) does not make the buffer swing.
const shrinkAfter = 64

// Options are what a Conn is given by its session.
type Options struct {
	ID             uint64         // the session's id: its place in the budget's queue of input waits
	Mem            *limits.Budget // the memory budget the buffers' bytes are taken from
	MaxQueryBuffer int64          // the largest the read buffer grows (one command's bytes)
	Limits         resp.Limits    // the framer's
	WriteTimeout   time.Duration  // a write of replies to the client (Write, WriteError)
	BytesIn        prometheus.Counter
	BytesOut       prometheus.Counter
}

// Conn is a client connection's bytes: the read buffer with its framing,
// and the output. It is used by one goroutine, its session's, but for the
// read a ReadAsync started.
type Conn struct {
	nc  net.Conn
	opt Options
	fr  resp.Framer

	buf        []byte // read buffer; unread bytes are buf[start:end]
	start, end int
	readFull   bool // the last read filled the buffer: the client sends more than it holds
	smallReads int  // reads in a row that used under a quarter of the buffer
	need       int  // the length the incomplete command at buf[start:] is known to need (0: unknown)
	taken      int  // the length of the command Next took last (Unread)
	rd         clientRead
	inHeld     int64 // bytes of the read buffer held of the memory budget

	// Out is the replies ready to write (Write). The session appends to
	// it, or makes a batch's replies the output (Adopt).
	Out     []byte
	outHeld int64     // bytes of Out held of the memory budget
	wdl     time.Time // the write deadline last set (proxy/deadline)
}

// New returns the Conn of nc, with a read buffer of InitialReadBuf bytes.
func New(nc net.Conn, opt Options) *Conn {
	c := &Conn{nc: nc, opt: opt, buf: make([]byte, InitialReadBuf)}
	c.fr.Limits = opt.Limits
	return c
}

// Net returns the client's connection.
func (c *Conn) Net() net.Conn { return c.nc }

// Buffered returns the read buffer's unread bytes and its free room
// (CLIENT LIST's qbuf and qbuf-free).
func (c *Conn) Buffered() (unread, free int) { return c.end - c.start, len(c.buf) - c.end }
