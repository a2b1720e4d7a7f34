package node

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// rawTimeout bounds one RawDo exchange (dial, write, read).
const rawTimeout = 10 * time.Second

// RawDo sends one command over a new plain TCP connection to addr and returns
// the exact bytes of the one reply, framed by RESP (RESP2 and RESP3 forms,
// nested aggregates included). An error reply is returned as bytes, not as
// an error.
func RawDo(addr string, args ...string) ([]byte, error) {
	c, err := dialRaw(addr, rawTimeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(args...)
}

// RawDoAll sends commands in order over one new plain TCP connection to
// addr, each after the previous one's reply, and returns the replies' exact
// bytes (error replies as bytes, as RawDo). MULTI ... EXEC among them runs
// as one transaction, so a reset such as FLUSHALL and the brand written back
// is never seen half done by another client.
func RawDoAll(addr string, cmds ...[]string) ([][]byte, error) {
	c, err := dialRaw(addr, rawTimeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	replies := make([][]byte, 0, len(cmds))
	for _, args := range cmds {
		reply, err := c.do(args...)
		if err != nil {
			return replies, err
		}
		replies = append(replies, reply)
	}
	return replies, nil
}

// rawConn is one plain connection that writes commands and frames replies.
type rawConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(addr string, timeout time.Duration) (*rawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("node: dial %s: %w", addr, err)
	}
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("node: deadline: %w", err)
	}
	return &rawConn{nc: nc, br: bufio.NewReader(nc)}, nil
}

func (c *rawConn) close() { _ = c.nc.Close() }

// do writes one command and returns the raw bytes of its reply.
func (c *rawConn) do(args ...string) ([]byte, error) {
	if _, err := c.nc.Write(AppendCommand(nil, args...)); err != nil {
		return nil, fmt.Errorf("node: write: %w", err)
	}
	return ReadReply(c.br)
}

// AppendCommand appends the RESP array encoding of args to dst.
func AppendCommand(dst []byte, args ...string) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, '\r', '\n')
	for _, a := range args {
		dst = append(dst, '$')
		dst = strconv.AppendInt(dst, int64(len(a)), 10)
		dst = append(dst, '\r', '\n')
		dst = append(dst, a...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}

// ReadReply reads exactly one RESP reply from r and returns its bytes.
func ReadReply(r *bufio.Reader) ([]byte, error) {
	var buf bytes.Buffer
	if err := readFrame(r, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func readLine(r *bufio.Reader, buf *bytes.Buffer) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: bad line %q", ErrProtocol, line)
	}
	buf.Write(line)
	return line[1 : len(line)-2], nil
}

func readFrame(r *bufio.Reader, buf *bytes.Buffer) error {
	kind, err := r.Peek(1)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	k := kind[0]
	head, err := readLine(r, buf)
	if err != nil {
		return err
	}
	switch k {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '!', '=':
		n, err := strconv.Atoi(string(head))
		if err != nil {
			return fmt.Errorf("%w: bad length %q", ErrProtocol, head)
		}
		if n < 0 {
			return nil // null bulk
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		if body[n] != '\r' || body[n+1] != '\n' {
			return fmt.Errorf("%w: bulk not terminated", ErrProtocol)
		}
		buf.Write(body)
		return nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(head))
		if err != nil {
			return fmt.Errorf("%w: bad count %q", ErrProtocol, head)
		}
		if k == '%' || k == '|' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			if err := readFrame(r, buf); err != nil {
				return err
			}
		}
		if k == '|' { // an attribute precedes the reply it annotates
			return readFrame(r, buf)
		}
		return nil
	default:
		return fmt.Errorf("%w: unknown type %q", ErrProtocol, k)
	}
}
