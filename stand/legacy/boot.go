package legacy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/resp"
)

// dialConn is the valkey-go DialCtxFn: it connects, runs the boot commands
// and the fence, and hands the connection over only when the fence passed.
// A fence refusal stops the client.
func (c *Client) dialConn(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	deadline := time.Now().Add(c.opts.DialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := nc.SetDeadline(deadline); err != nil {
		_ = nc.Close()
		return nil, err
	}
	if err := c.boot(nc); err != nil {
		_ = nc.Close()
		var fe *FenceError
		if errors.As(err, &fe) {
			c.stop(fe)
		}
		return nil, err
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		_ = nc.Close()
		return nil, err
	}
	c.fences.Add(1)
	return nc, nil
}

// boot runs the boot commands, then the wire-4 fence, on a new connection.
func (c *Client) boot(nc net.Conn) error {
	rc := &rawConn{w: nc, r: bufio.NewReader(nc)}
	var boot [][]string
	if c.opts.Password != "" {
		if c.opts.Username != "" {
			boot = append(boot, []string{"AUTH", c.opts.Username, c.opts.Password})
		} else {
			boot = append(boot, []string{"AUTH", c.opts.Password})
		}
	}
	if c.opts.DB != 0 {
		boot = append(boot, []string{"SELECT", strconv.Itoa(c.opts.DB)})
	}
	if c.opts.ClientName != "" {
		boot = append(boot, []string{"CLIENT", "SETNAME", c.opts.ClientName})
	}
	for _, line := range boot {
		v, err := rc.do(line...)
		if err != nil {
			return err
		}
		c.record(Call{Op: "boot", Line: redact(line), Reply: v})
		if v.Kind == KindError {
			return fmt.Errorf("%w: %s: %s", ErrBoot, line[0], v.Str)
		}
	}
	return c.fence(rc)
}

// fence is the wire-4 fence: GET; when absent SET NX and GET again; only the
// client's own brand passes.
func (c *Client) fence(rc *rawConn) error {
	get := []string{"GET", VersionKey}
	v, err := c.fenceDo(rc, get)
	if err != nil {
		return err
	}
	if v.Kind == KindNil {
		if _, err := c.fenceDo(rc, []string{"SET", VersionKey, c.opts.Brand, "NX"}); err != nil {
			return err
		}
		if v, err = c.fenceDo(rc, get); err != nil {
			return err
		}
	}
	switch {
	case v.Kind == KindNil:
		return &FenceError{Absent: true}
	case v.Kind == KindError:
		return &FenceError{Refused: v.Str}
	case v.Kind != KindString:
		return &FenceError{Got: v.String()}
	case v.Str != c.opts.Brand:
		return &FenceError{Got: v.Str}
	}
	return nil
}

func (c *Client) fenceDo(rc *rawConn, line []string) (Value, error) {
	v, err := rc.do(line...)
	if err != nil {
		return Value{}, err
	}
	c.record(Call{Op: "fence", Line: line, Reply: v})
	return v, nil
}

// redact hides the password of an AUTH line in a record.
func redact(line []string) []string {
	if line[0] != "AUTH" {
		return line
	}
	out := append([]string(nil), line...)
	out[len(out)-1] = "<password>"
	return out
}

// rawConn is the minimal RESP2 exchange the boot and the fence need, before
// the connection is handed to valkey-go.
type rawConn struct {
	w io.Writer
	r *bufio.Reader
}

func (rc *rawConn) do(args ...string) (Value, error) {
	if _, err := rc.w.Write(resp.AppendCommand(nil, args...)); err != nil {
		return Value{}, fmt.Errorf("%w: %s: %v", ErrProtocol, args[0], err)
	}
	v, err := rc.read()
	if err != nil {
		return Value{}, fmt.Errorf("%w: %s: %v", ErrProtocol, args[0], err)
	}
	return v, nil
}

// read reads one reply (package resp frames and parses it) as the
// boot's Value: RESP2 only, as the boot and the fence speak it.
func (rc *rawConn) read() (Value, error) {
	b, err := resp.ReadReply(rc.r)
	if err != nil {
		return Value{}, err
	}
	v, err := resp.Parse(b)
	if err != nil {
		return Value{}, err
	}
	return fromRESP(&v)
}

// fromRESP converts a parsed RESP2 reply: an error's text without its
// "ERR " prefix, as read() has always given it.
func fromRESP(v *resp.Value) (Value, error) {
	switch {
	case v.Type == '+':
		return Value{Kind: KindString, Str: string(v.Str)}, nil
	case v.Type == '-':
		return Value{Kind: KindError, Str: strings.TrimPrefix(string(v.Str), "ERR ")}, nil
	case v.Type == ':':
		return Value{Kind: KindInt, Int: v.Int}, nil
	case (v.Type == '$' || v.Type == '*') && v.Nil:
		return Value{Kind: KindNil}, nil
	case v.Type == '$':
		return Value{Kind: KindString, Str: string(v.Str)}, nil
	case v.Type == '*':
		out := Value{Kind: KindArray, Array: make([]Value, len(v.Elems))}
		for i := range v.Elems {
			e, err := fromRESP(&v.Elems[i])
			if err != nil {
				return Value{}, err
			}
			out.Array[i] = e
		}
		return out, nil
	}
	return Value{}, fmt.Errorf("unexpected reply type %q", v.Type)
}
