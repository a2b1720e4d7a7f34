package scripts

import (
	"bufio"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// wire is one RESP2 connection to a scripts node with every script loaded.
// Replies are decoded to int64, string, nil, []any or replyError, so tests
// compare reply types as well as values.
type wire struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

type replyError string

func (e replyError) Error() string { return string(e) }

// newWire starts a scripts node on srv with every script loaded.
func newWire(t *testing.T, srv node.Server) *wire {
	t.Helper()
	n := node.StartT(t, node.Options{Role: node.Scripts, Server: srv.Path})
	conn, err := net.Dial("tcp", n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	w := &wire{t: t, conn: conn, r: bufio.NewReader(conn)}
	for _, name := range Names() {
		if got := w.do("SCRIPT", "LOAD", string(Body(name))); got != shamap.SHA(Body(name)) {
			t.Fatalf("SCRIPT LOAD %s = %v, want %s", name, got, shamap.SHA(Body(name)))
		}
	}
	return w
}

// on returns the same connection reporting to t (a subtest).
func (w *wire) on(t *testing.T) *wire {
	c := *w
	c.t = t
	return &c
}

// do sends one command and decodes its reply.
func (w *wire) do(args ...string) any {
	w.t.Helper()
	if err := w.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.conn.Write(resp.AppendCommand(nil, args...)); err != nil {
		w.t.Fatal(err)
	}
	raw, err := resp.ReadReply(w.r)
	if err != nil {
		w.t.Fatal(err)
	}
	v, rest := decode(raw)
	if len(rest) != 0 {
		w.t.Fatalf("trailing bytes %q", rest)
	}
	return v
}

func decode(b []byte) (any, []byte) {
	i := 0
	for b[i] != '\n' {
		i++
	}
	head, rest := string(b[1:i-1]), b[i+1:]
	switch b[0] {
	case '+':
		return head, rest
	case '-':
		return replyError(head), rest
	case ':':
		n, _ := strconv.ParseInt(head, 10, 64)
		return n, rest
	case '$':
		n, _ := strconv.Atoi(head)
		if n < 0 {
			return nil, rest
		}
		return string(rest[:n]), rest[n+2:]
	case '*':
		n, _ := strconv.Atoi(head)
		if n < 0 {
			return nil, rest
		}
		out := []any{}
		for range n {
			var v any
			v, rest = decode(rest)
			out = append(out, v)
		}
		return out, rest
	}
	panic(fmt.Sprintf("unexpected reply %q", b))
}

// call runs a script by EVALSHA with its keys and values.
func (w *wire) call(name string, keys []string, values ...string) any {
	w.t.Helper()
	return w.eval("EVALSHA", name, keys, values...)
}

// read runs a read script by EVALSHA_RO.
func (w *wire) read(name string, keys []string, values ...string) any {
	w.t.Helper()
	return w.eval("EVALSHA_RO", name, keys, values...)
}

func (w *wire) eval(cmd, name string, keys []string, values ...string) any {
	w.t.Helper()
	args := []string{cmd, shamap.SHA(Body(name)), strconv.Itoa(len(keys))}
	args = append(append(args, keys...), values...)
	return w.do(args...)
}

// now reads the server's clock in ms.
func (w *wire) now() int64 {
	w.t.Helper()
	tv := w.do("TIME").([]any)
	sec, _ := strconv.ParseInt(tv[0].(string), 10, 64)
	usec, _ := strconv.ParseInt(tv[1].(string), 10, 64)
	return sec*1000 + usec/1000
}

// timed runs f and returns its reply with the server time window around it.
func (w *wire) timed(f func() any) (reply any, lo, hi int64) {
	lo = w.now()
	reply = f()
	hi = w.now()
	return reply, lo, hi
}

func (w *wire) expect(got, want any, what string) {
	w.t.Helper()
	if !reflect.DeepEqual(got, want) {
		w.t.Fatalf("%s: got %#v, want %#v", what, got, want)
	}
}

// row returns the row's hash as a map (nil when absent).
func (w *wire) row(key string) map[string]string {
	w.t.Helper()
	flat := w.do("HGETALL", key).([]any)
	if len(flat) == 0 {
		return nil
	}
	m := map[string]string{}
	for i := 0; i < len(flat); i += 2 {
		m[flat[i].(string)] = flat[i+1].(string)
	}
	return m
}

// score returns a member's score as an integer, or -1 when absent.
func (w *wire) score(key, id string) int64 {
	w.t.Helper()
	v := w.do("ZSCORE", key, id)
	if v == nil {
		return -1
	}
	n, err := strconv.ParseInt(v.(string), 10, 64)
	if err != nil {
		w.t.Fatalf("ZSCORE %s %s = %q", key, id, v)
	}
	return n
}

func (w *wire) within(got any, lo, hi int64, what string) int64 {
	w.t.Helper()
	n, ok := got.(int64)
	if !ok || n < lo || n > hi {
		w.t.Fatalf("%s: %#v not an integer in [%d, %d]", what, got, lo, hi)
	}
	return n
}

func (w *wire) errorText(got any) string {
	w.t.Helper()
	e, ok := got.(replyError)
	if !ok {
		w.t.Fatalf("want an error reply, got %#v", got)
	}
	return string(e)
}

// queue names the keys of one queue.
type queue string

func (q queue) key(role string) string { return "emq:{" + string(q) + "}:" + role }
func (q queue) job(id string) string   { return q.key("job:" + id) }
func (q queue) pending() string        { return q.key("pending") }
func (q queue) delayed() string        { return q.key("delayed") }
func (q queue) active() string         { return q.key("active") }
func (q queue) done() string           { return q.key("done") }
func (q queue) dead() string           { return q.key("dead") }
func (q queue) paused() string         { return q.key("paused") }

// keys returns the keys a script takes for job id, in the script's order.
func (q queue) keys(script, id string) []string {
	switch script {
	case "enqueue":
		return []string{q.job(id), q.pending()}
	case "claim2":
		return []string{q.pending(), q.active()}
	case "extend":
		return []string{q.active(), q.job(id)}
	case "complete":
		return []string{q.active(), q.job(id), q.done()}
	case "fail":
		return []string{q.active(), q.job(id), q.delayed(), q.dead()}
	case "retry":
		return []string{q.dead(), q.job(id), q.pending()}
	case "cancel":
		return []string{q.pending(), q.delayed(), q.job(id)}
	case "promote":
		return []string{q.delayed(), q.pending()}
	case "reap":
		return []string{q.active(), q.pending(), q.dead()}
	case "pause", "resume":
		return []string{q.paused()}
	case "remove":
		return []string{q.job(id), q.pending(), q.delayed(), q.active(), q.done(), q.dead()}
	case "stats":
		return []string{q.pending(), q.delayed(), q.active(), q.done(), q.dead(), q.paused()}
	case "peek":
		return []string{q.job(id)}
	}
	panic("unknown script " + script)
}
