package node

import (
	"bufio"
	"fmt"
	"net"
	"time"

	"github.com/emqproxy/emqproxy/resp"
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

// do writes one command and returns the raw bytes of its reply (package
// resp frames and checks them; any failure to read one is ErrProtocol).
func (c *rawConn) do(args ...string) ([]byte, error) {
	if _, err := c.nc.Write(resp.AppendCommand(nil, args...)); err != nil {
		return nil, fmt.Errorf("node: write: %w", err)
	}
	b, err := resp.ReadReply(c.br)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return b, nil
}
