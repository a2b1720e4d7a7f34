package moduletest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
)

// conn is one plain TCP connection that sends commands and returns either
// the exact reply bytes (do) or the parsed reply (val).
type conn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

// dial connects to addr, authenticating as user/pass when given.
func dial(t testing.TB, addr string, userPass ...string) *conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c := &conn{t: t, nc: nc, br: bufio.NewReader(nc)}
	t.Cleanup(func() { _ = nc.Close() })
	if len(userPass) > 0 {
		if r := c.do(append([]string{"AUTH"}, userPass...)...); r != "+OK\r\n" {
			t.Fatalf("AUTH %v: %q", userPass, r)
		}
	}
	return c
}

// do sends one command and returns the exact reply bytes.
func (c *conn) do(args ...string) string {
	c.t.Helper()
	if err := c.nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		c.t.Fatalf("deadline: %v", err)
	}
	if _, err := c.nc.Write(resp.AppendCommand(nil, args...)); err != nil {
		c.t.Fatalf("write %q: %v", args, err)
	}
	b, err := resp.ReadReply(c.br)
	if err != nil {
		c.t.Fatalf("reply to %q: %v", args, err)
	}
	return string(b)
}

// val sends one command and returns its parsed reply: string for bulk and
// simple strings, int64 for integers, nil for null, []any for arrays and
// replyError for errors.
func (c *conn) val(args ...string) any {
	c.t.Helper()
	v, rest, err := parse([]byte(c.do(args...)))
	if err != nil || len(rest) != 0 {
		c.t.Fatalf("parse reply to %q: %v", args, err)
	}
	return v
}

// str is val for a reply that must be a bulk string or nil ("" for nil).
func (c *conn) str(args ...string) string {
	c.t.Helper()
	switch v := c.val(args...).(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		c.t.Fatalf("%q: want a string, got %#v", args, v)
		return ""
	}
}

// num is val for a reply that must be an integer.
func (c *conn) num(args ...string) int64 {
	c.t.Helper()
	v, ok := c.val(args...).(int64)
	if !ok {
		c.t.Fatalf("%q: want an integer", args)
	}
	return v
}

// replyError is an error reply, without its leading '-'.
type replyError string

func (e replyError) Error() string { return string(e) }

var errShort = errors.New("short reply")

// parse reads one RESP2 value from b.
func parse(b []byte) (any, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return nil, nil, errShort
	}
	head, rest := string(b[1:i]), b[i+2:]
	switch b[0] {
	case '+':
		return head, rest, nil
	case '-':
		return replyError(head), rest, nil
	case ':':
		n, err := strconv.ParseInt(head, 10, 64)
		return n, rest, err
	case '$':
		n, err := strconv.Atoi(head)
		if err != nil || n < 0 {
			return nil, rest, err
		}
		if len(rest) < n+2 {
			return nil, nil, errShort
		}
		return string(rest[:n]), rest[n+2:], nil
	case '*':
		n, err := strconv.Atoi(head)
		if err != nil || n < 0 {
			return nil, rest, err
		}
		out := make([]any, n)
		for j := range out {
			if out[j], rest, err = parse(rest); err != nil {
				return nil, nil, err
			}
		}
		return out, rest, nil
	}
	return nil, nil, fmt.Errorf("unknown reply type %q", b[0])
}

// bulk encodes s as a RESP bulk string, for building expected replies.
func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// array encodes the given encoded elements as a RESP array.
func array(elems ...string) string {
	return "*" + strconv.Itoa(len(elems)) + "\r\n" + strings.Join(elems, "")
}

// errReply encodes text as a RESP error.
func errReply(text string) string { return "-" + text + "\r\n" }

// with returns the same connection reporting failures to t.
func (c *conn) with(t testing.TB) *conn { return &conn{t: t, nc: c.nc, br: c.br} }
