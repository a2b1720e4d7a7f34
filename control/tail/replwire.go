package tail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/emqproxy/emqproxy/resp"
)

// The replication stream's wire: the reader's commands written as arrays
// of bulk strings (resp.AppendCommand), every length read as the server
// writes it (resp.ParseInt). The handshake's replies and the stream's
// commands are framed here rather than by resp.Reader, because a
// replication stream is not a reply stream: a command may come inline (a
// PING), a node sends bare newlines while it prepares the RDB, the RDB
// payload is a `$<len>\r\n` with no CRLF after it (replica.go), and every
// header is checked against its own bound before anything is read past
// it, so that a broken or hostile stream fails at once instead of being
// read through as resp.Reader reads a reply over its cap.

// replReply is a handshake reply: a simple string, an error, an integer or
// a bulk (str), or an array of bulks (arr).
type replReply struct {
	kind byte
	str  string
	arr  []string
}

// send writes one command and gives its reply to (the connection's
// deadline; no per-read allowance yet).
func (r *replStream) send(to time.Duration, args ...string) error {
	b := resp.AppendCommand(make([]byte, 0, 64), args...)
	_ = r.conn.SetReadDeadline(time.Now().Add(to))
	if err := r.write(b); err != nil {
		return r.broken(args[0], err)
	}
	return nil
}

// call sends one command and reads its reply; an error reply is a refusal
// that names the command (never its arguments: AUTH carries a password).
func (r *replStream) call(to time.Duration, args ...string) (replReply, error) {
	if err := r.send(to, args...); err != nil {
		return replReply{}, err
	}
	what := args[0]
	if len(args) > 1 && args[0] != "AUTH" {
		what += " " + args[1]
	}
	rep, err := r.reply()
	if err != nil {
		return rep, r.broken(what+" reply", err)
	}
	if rep.kind == '-' {
		return rep, fmt.Errorf("%w: %s: %s answered %s", ErrReplRefused, r.name, what, rep.str)
	}
	return rep, nil
}

// config reads one parameter with CONFIG GET.
func (r *replStream) config(to time.Duration, name string) (string, error) {
	rep, err := r.call(to, "CONFIG", "GET", name)
	if err != nil {
		return "", err
	}
	if rep.kind != '*' || len(rep.arr) != 2 {
		return "", fmt.Errorf("%w: %s: CONFIG GET %s answered %d values, not the parameter and its value", ErrReplRefused, r.name, name, len(rep.arr))
	}
	return rep.arr[1], nil
}

// reply reads one handshake reply.
func (r *replStream) reply() (replReply, error) {
	line, err := r.line(false)
	if err != nil {
		return replReply{}, err
	}
	if len(line) == 0 {
		return replReply{}, fmt.Errorf("%w: %s: protocol: an empty line where a reply was due", ErrReplStream, r.name)
	}
	switch line[0] {
	case '+', '-', ':':
		return replReply{kind: line[0], str: string(line[1:])}, nil
	case '$':
		n, err := r.length(line, replMaxReply)
		if err != nil || n < 0 {
			return replReply{kind: '$'}, err
		}
		b, err := r.bulk(n)
		return replReply{kind: '$', str: string(b)}, err
	case '*':
		n, err := r.length(line, 1024)
		if err != nil {
			return replReply{}, err
		}
		rep := replReply{kind: '*'}
		for range n {
			line, err := r.line(false)
			if err != nil {
				return rep, err
			}
			if len(line) == 0 || line[0] != '$' {
				return rep, fmt.Errorf("%w: %s: protocol: an array element %q is not a bulk string", ErrReplStream, r.name, clip(line))
			}
			m, err := r.length(line, replMaxReply)
			if err != nil || m < 0 {
				return rep, err
			}
			b, err := r.bulk(m)
			if err != nil {
				return rep, err
			}
			rep.arr = append(rep.arr, string(b))
		}
		return rep, nil
	}
	return replReply{}, fmt.Errorf("%w: %s: protocol: the reply %q", ErrReplStream, r.name, clip(line))
}

// command reads one command of the stream: an array of bulk strings, or an
// inline line of space-separated words. nil for an empty one.
func (r *replStream) command() ([][]byte, error) {
	line, err := r.line(false)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		var argv [][]byte
		for _, w := range bytes.Fields(line) {
			argv = append(argv, bytes.Clone(w))
		}
		return argv, nil
	}
	n, err := r.length(line, replMaxArgs)
	if err != nil || n <= 0 {
		return nil, err
	}
	argv := make([][]byte, 0, min(n, 64))
	for range n {
		line, err := r.line(false)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 || line[0] != '$' {
			return nil, fmt.Errorf("%w: %s: protocol: argument %d of a command is %q, not a bulk string", ErrReplStream, r.name, len(argv)+1, clip(line))
		}
		m, err := r.length(line, replMaxBulk)
		if err != nil {
			return nil, err
		}
		if m < 0 {
			return nil, fmt.Errorf("%w: %s: protocol: argument %d of a command is a nil bulk", ErrReplStream, r.name, len(argv)+1)
		}
		b, err := r.bulk(m)
		if err != nil {
			return nil, err
		}
		argv = append(argv, b)
	}
	return argv, nil
}

// line reads one line without its CRLF (or LF). With keepalive, empty
// lines (the newlines a node sends while it prepares an RDB) are counted
// and skipped. The line is valid until the next read.
func (r *replStream) line(keepalive bool) ([]byte, error) {
	for {
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: %s: protocol: a line longer than %d bytes (%q)", ErrReplStream, r.name, replMaxLine, clip(line))
		}
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		if keepalive && len(line) == 0 {
			r.keepalives++
			continue
		}
		return line, nil
	}
}

// length parses the length of a "*<n>" or "$<n>" header, -1 (nil) allowed,
// up to max.
func (r *replStream) length(line []byte, max int) (int, error) {
	n, ok := resp.ParseInt(line[1:])
	switch {
	case !ok || n < -1:
		return 0, fmt.Errorf("%w: %s: protocol: the header %q has no length", ErrReplStream, r.name, clip(line))
	case n > int64(max):
		return 0, fmt.Errorf("%w: %s: protocol: the header %q is past the bound of %d", ErrReplStream, r.name, clip(line), max)
	}
	return int(n), nil
}

// bulk reads a bulk string of n bytes and its CRLF. Past 1 MiB the buffer
// grows with what arrives, never to n at once.
func (r *replStream) bulk(n int) ([]byte, error) {
	var b []byte
	if n <= 1<<20 {
		b = make([]byte, n+2)
		if _, err := io.ReadFull(r.br, b); err != nil {
			return nil, err
		}
	} else {
		var buf bytes.Buffer
		buf.Grow(1 << 20)
		if _, err := io.CopyN(&buf, r.br, int64(n)+2); err != nil {
			return nil, err
		}
		b = buf.Bytes()
	}
	if b[n] != '\r' || b[n+1] != '\n' {
		return nil, fmt.Errorf("%w: %s: protocol: a bulk string of %d bytes is not followed by CRLF", ErrReplStream, r.name, n)
	}
	return b[:n:n], nil
}
