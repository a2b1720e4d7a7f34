package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
)

// The upstream reply framer. It copies each reply's exact bytes, never
// decoding or re-encoding them, so a client gets what the server sent: simple
// versus bulk strings, `$-1` versus `*-1`, nested arrays, error texts. It
// knows the RESP2 and the RESP3 types: an upstream connection speaks the
// protocol of the clients it carries (RESP2, or RESP3 after HELLO 3: the
// RESP3 shared connections and a RESP3 client's own ones), and a RESP3
// connection may carry pushes between replies.

// bigChunk is the largest piece of a bulk read in one go; between pieces the
// reader reports progress, so a large reply that keeps arriving is not
// mistaken for a stalled connection.
const bigChunk = 1 << 20

// ErrProtocol means a server sent bytes that are not RESP. Every error of
// the Reader, of ReadReply and of Parse about the bytes themselves wraps
// it. Its text is the one the proxy's logs and UPSTREAM replies have
// always shown for it.
var ErrProtocol = errors.New("resp: upstream protocol error")

// Reader frames replies from an upstream connection.
type Reader struct {
	br *bufio.Reader
	// Progress, when set, is called between the pieces of a large bulk.
	Progress func()
	// Acct, when set, is the memory budget's account of the reply being
	// read: its bytes past the free ones are kept only as the budget
	// grants them; past that the reply is read and discarded as one over
	// max is, and Acct.Refused tells why.
	Acct *Account
}

// NewReader returns a Reader of the replies br reads.
func NewReader(br *bufio.Reader) Reader { return Reader{br: br} }

// ReadReply reads one complete reply from br and returns its exact bytes,
// uncapped, checked as Parse checks them (a bulk not followed by CRLF, a
// number the server would not write, aggregates nested past 64 are
// errors). It is the reader of the tools and tests that talk to a server
// directly, off the data path.
func ReadReply(br *bufio.Reader) ([]byte, error) {
	r := NewReader(br)
	b, _, err := r.Read(nil, -1)
	if err != nil {
		return nil, err
	}
	if _, err := Parse(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Budget is the memory budget replies are counted against.
type Budget interface {
	// TryTake takes n bytes when they fit, without waiting.
	TryTake(n int64) bool
}

// FreeReplyBytes are the bytes of replies not taken from a Budget: the
// common small reply never touches it.
const FreeReplyBytes = 16 << 10

// ReplyGrant is the least a reply takes from a Budget at a time, so a
// reply of many small parts asks it once per 64 KiB, not per part.
const ReplyGrant = 64 << 10

// Account is what replies being read hold of a Budget. Its owner gives
// Held back to the budget once the replies are written.
type Account struct {
	Budget  Budget // nil: not counted
	Held    int64  // bytes granted
	Refused bool   // the budget refused the reply read last; the owner clears it
	Dropped int    // replies the owner dropped after a refusal, not yet counted
}

// fits reports whether a reply may take dst to n bytes: within limit (Read's
// max; < 0 means no cap) and within what the budget grants.
func (r *Reader) fits(n, limit int) bool {
	if limit >= 0 && n > limit {
		return false
	}
	a := r.Acct
	if a == nil || a.Budget == nil || int64(n) <= FreeReplyBytes+a.Held {
		return true
	}
	more := max(int64(n)-FreeReplyBytes-a.Held, ReplyGrant)
	if !a.Budget.TryTake(more) {
		a.Refused = true
		return false
	}
	a.Held += more
	return true
}

// Read appends the bytes of one complete reply to dst. While len(dst) would
// stay within max the bytes are kept; past it the rest of the reply is read
// and discarded (the stream stays in sync) and over is true. max < 0 means
// no cap.
func (r *Reader) Read(dst []byte, max int) (out []byte, over bool, err error) {
	pending := 1
	for pending > 0 {
		pending--
		line, err := r.line()
		if err != nil {
			return dst, over, err
		}
		over = over || !r.fits(len(dst)+len(line), max)
		if !over {
			dst = append(dst, line...)
		}
		switch line[0] {
		case '+', '-', ':', '_', '#', ',', '(':
		case '$', '!', '=':
			n, ok := ParseInt(line[1 : len(line)-2])
			if !ok || n < -1 {
				return dst, over, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, line)
			}
			if n < 0 {
				if line[0] != '$' {
					return dst, over, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, line)
				}
				continue
			}
			dst, over, err = r.bulk(dst, int(n)+2, max, over)
			if err != nil {
				return dst, over, err
			}
		case '*', '~', '>', '%', '|':
			n, ok := ParseInt(line[1 : len(line)-2])
			if !ok || n < -1 || (n < 0 && line[0] != '*') {
				return dst, over, fmt.Errorf("%w: bad aggregate length %q", ErrProtocol, line)
			}
			if n > 0 {
				switch line[0] {
				case '%':
					n *= 2
				case '|':
					n = n*2 + 1 // an attribute precedes the value it describes
				}
				pending += int(n)
			}
		default:
			return dst, over, fmt.Errorf("%w: unexpected reply type %q", ErrProtocol, line[0])
		}
	}
	return dst, over, nil
}

// HasReplies reports whether the bytes already read hold n complete replies
// (RESP3 pushes between them are no replies), so that reading them cannot
// block. It frames as Read does; bytes Read frames as an error count as
// incomplete (Read then reports the error).
func (r *Reader) HasReplies(n int) bool {
	buf, _ := r.br.Peek(r.br.Buffered())
	i := 0
	for n > 0 {
		if i >= len(buf) {
			return false
		}
		push := buf[i] == '>'
		next, ok := skipFrame(buf, i)
		if !ok {
			return false
		}
		if !push {
			n--
		}
		i = next
	}
	return true
}

// Buffered returns the number of bytes read from the connection and not
// yet framed.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Wait waits until the first byte of the next reply is there, or the
// connection's read fails (its deadline included).
func (r *Reader) Wait() error {
	_, err := r.br.Peek(1)
	return err
}

// skipFrame returns where the complete frame at buf[i:] ends; ok is false
// when buf holds only part of it (or bytes that do not frame).
func skipFrame(buf []byte, i int) (next int, ok bool) {
	for pending := 1; pending > 0; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 2 {
			return 0, false
		}
		line := buf[i : i+j+1]
		i += j + 1
		pending--
		switch line[0] {
		case '$', '!', '=', '*', '~', '>', '%', '|':
			m, ok := ParseInt(line[1 : len(line)-2])
			if !ok || m > int64(len(buf)) {
				return 0, false
			}
			switch line[0] {
			case '$', '!', '=':
				if m >= 0 {
					i += int(m) + 2
				}
			case '%':
				pending += 2 * int(max(m, 0))
			case '|':
				pending += 2*int(max(m, 0)) + 1
			default:
				pending += int(max(m, 0))
			}
			if i > len(buf) {
				return 0, false
			}
		}
	}
	return i, true
}

// line returns the next line, with its "\r\n". The slice is valid until the
// next Read. A line longer than the reader's buffer is assembled in a copy.
func (r *Reader) line() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			line, err = r.br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: malformed line %q", ErrProtocol, line)
	}
	return line, nil
}

// bulk reads n bytes (a bulk's data and its "\r\n"), appending them to dst
// unless over the cap.
func (r *Reader) bulk(dst []byte, n, max int, over bool) ([]byte, bool, error) {
	over = over || !r.fits(len(dst)+n, max)
	if !over && cap(dst)-len(dst) < n {
		// Room for the whole bulk at once, at least doubling: append's
		// growth of a large slice by a quarter at a time, chunk after
		// chunk, would leave several times the reply's size as garbage.
		size := 2 * cap(dst)
		if size < len(dst)+n {
			size = len(dst) + n
		}
		dst = append(make([]byte, 0, size), dst...)
	}
	for n > 0 {
		k := min(n, bigChunk)
		if over {
			if _, err := r.br.Discard(k); err != nil {
				return dst, over, err
			}
		} else {
			l := len(dst)
			dst = slices.Grow(dst, k)[:l+k]
			if _, err := io.ReadFull(r.br, dst[l:]); err != nil {
				return dst[:l], over, err
			}
		}
		n -= k
		if n > 0 && r.Progress != nil {
			r.Progress()
		}
	}
	return dst, over, nil
}
