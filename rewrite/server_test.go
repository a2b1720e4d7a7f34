package rewrite

import (
	"bufio"
	"bytes"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// session is one plain connection to a real server, for comparing reply
// bytes in a given connection state.
type session struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *session {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	if err := nc.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &session{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// do sends one command and returns the exact bytes of its reply.
func (s *session) do(args [][]byte) []byte {
	s.t.Helper()
	req := resp.AppendArray(nil, len(args))
	for _, a := range args {
		req = resp.AppendBulk(req, a)
	}
	if _, err := s.nc.Write(req); err != nil {
		s.t.Fatal(err)
	}
	b, err := resp.ReadReply(s.br)
	if err != nil {
		s.t.Fatalf("read reply: %v", err)
	}
	return b
}

// serverCase is one command whose local answer must equal the server's.
type serverCase struct {
	name  string
	setup [][]string // commands sent first on the same connection
	args  []string
	st    State
}

// TestRepliesMatchServerIntegration compares, byte for byte, what Decide
// answers itself (Local and the refusals modelled on the server) with what
// redis-server answers on a connection in the same state.
func TestRepliesMatchServerIntegration(t *testing.T) {
	m := testMap(t)
	bare := node.StartT(t, node.Options{Role: node.Bare})
	locked := node.StartT(t, node.Options{Role: node.Bare, Password: "pw"})
	multi := State{InMulti: true}
	inMulti := [][]string{{"MULTI"}}

	cases := []serverCase{
		{name: "AUTH without password", args: []string{"AUTH", "x"}},
		{name: "AUTH unknown user", args: []string{"AUTH", "u", "x"}},
		{name: "AUTH default nopass", args: []string{"AUTH", "default", "x"}},
		{name: "AUTH arity", args: []string{"AUTH"}},
		{name: "AUTH syntax", args: []string{"AUTH", "a", "b", "c"}},
		{name: "PING", args: []string{"PING"}},
		{name: "PING msg", args: []string{"ping", "hello"}},
		{name: "PING arity", args: []string{"PING", "a", "b"}},
		{name: "ECHO", args: []string{"ECHO", "x y"}},
		{name: "ECHO arity", args: []string{"ECHO"}},
		{name: "QUIT", args: []string{"QUIT"}},
		{name: "RESET arity", args: []string{"RESET", "x"}},
		{name: "HELLO 3x", args: []string{"HELLO", "3x"}},
		{name: "HELLO 1", args: []string{"HELLO", "1"}},
		{name: "HELLO 4", args: []string{"HELLO", "4"}},
		{name: "HELLO option", args: []string{"HELLO", "2", "FOO"}},
		{name: "HELLO short AUTH", args: []string{"HELLO", "2", "AUTH", "u"}},
		{name: "HELLO short SETNAME", args: []string{"HELLO", "2", "SETNAME"}},
		{name: "HELLO bad name", args: []string{"HELLO", "2", "SETNAME", "a\nb"}},
		{name: "HELLO AUTH first", args: []string{"HELLO", "AUTH", "default", "x"}},
		{name: "SELECT not integer", args: []string{"SELECT", "1x"}},
		{name: "SELECT 0", args: []string{"SELECT", "0"}},
		{name: "SELECT arity", args: []string{"SELECT"}},
		{name: "CLIENT SETNAME", args: []string{"CLIENT", "SETNAME", "w"}},
		{name: "CLIENT SETNAME bad", args: []string{"CLIENT", "SETNAME", "a b"}},
		{name: "CLIENT SETNAME arity", args: []string{"CLIENT", "SETNAME"}},
		{name: "CLIENT GETNAME unset", args: []string{"CLIENT", "GETNAME"}},
		{name: "CLIENT GETNAME", setup: [][]string{{"CLIENT", "SETNAME", "w-1"}}, args: []string{"CLIENT", "GETNAME"},
			st: State{Name: []byte("w-1")}},
		{name: "CLIENT GETNAME arity", args: []string{"CLIENT", "GETNAME", "x"}},
		{name: "CLIENT ID arity", args: []string{"CLIENT", "ID", "x"}},
		{name: "CLIENT INFO arity", args: []string{"CLIENT", "INFO", "x"}},
		{name: "CLIENT NO-EVICT", args: []string{"CLIENT", "NO-EVICT", "on"}},
		{name: "CLIENT NO-EVICT bad", args: []string{"CLIENT", "NO-EVICT", "maybe"}},
		{name: "CLIENT NO-EVICT arity", args: []string{"CLIENT", "NO-EVICT"}},
		{name: "CLIENT arity", args: []string{"CLIENT"}},
		{name: "MULTI", args: []string{"MULTI"}},
		{name: "MULTI arity", args: []string{"MULTI", "x"}},
		{name: "MULTI nested", setup: inMulti, args: []string{"MULTI"}, st: multi},
		{name: "EXEC without MULTI", args: []string{"EXEC"}},
		{name: "EXEC arity", args: []string{"EXEC", "x"}},
		{name: "EXEC arity inside", setup: inMulti, args: []string{"EXEC", "x"}, st: multi},
		{name: "EXECABORT", setup: [][]string{{"MULTI"}, {"GET"}}, args: []string{"EXEC"},
			st: State{InMulti: true, MultiAborted: true}},
		{name: "DISCARD", setup: inMulti, args: []string{"DISCARD"}, st: multi},
		{name: "DISCARD without MULTI", args: []string{"DISCARD"}},
		{name: "DISCARD arity", args: []string{"DISCARD", "x"}},
		{name: "WATCH inside MULTI", setup: inMulti, args: []string{"WATCH", "k"}, st: multi},
		{name: "WATCH arity", args: []string{"WATCH"}},
		{name: "UNWATCH arity", args: []string{"UNWATCH", "x"}},
		{name: "EVAL numkeys not integer", args: []string{"EVAL", "return 1", "x"}},
		{name: "EVAL numkeys -0", args: []string{"EVAL", "return 1", "-0"}},
		{name: "EVAL numkeys negative", args: []string{"EVAL", "return 1", "-1"}},
		{name: "EVAL numkeys too large", args: []string{"EVAL", "return 1", "2", "k"}},
		{name: "EVAL_RO numkeys", args: []string{"EVAL_RO", "return 1", "-1"}},
		{name: "EVAL arity", args: []string{"EVAL", "return 1"}},
		{name: "EVALSHA arity", args: []string{"EVALSHA", shaEnqueue}},
		{name: "SCRIPT arity", args: []string{"SCRIPT"}},
		{name: "SCRIPT LOAD arity", args: []string{"SCRIPT", "LOAD"}},
		{name: "SCRIPT EXISTS arity", args: []string{"SCRIPT", "EXISTS"}},
	}
	p := &Policy{Map: m}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := dial(t, bare.Addr)
			for _, a := range c.setup {
				s.do(argv(a...))
			}
			st := c.st
			d := Decide(argv(c.args...), &st, p)
			if d.Action != Local && d.Action != Refuse {
				t.Fatalf("action %v, want an answer from the proxy", d.Action)
			}
			if got := s.do(argv(c.args...)); !bytes.Equal(d.Reply, got) {
				t.Errorf("proxy answers %q, server %q", d.Reply, got)
			}
		})
	}

	t.Run("HELLO", func(t *testing.T) {
		s := dial(t, bare.Addr)
		got := s.do(argv("HELLO", "2", "SETNAME", "n"))
		id := regexp.MustCompile(`\$2\r\nid\r\n:(\d+)\r\n`).FindSubmatch(got)
		if id == nil {
			t.Fatalf("no id in %q", got)
		}
		n, _ := strconv.ParseInt(string(id[1]), 10, 64)
		ver := regexp.MustCompile(`version\r\n\$\d+\r\n([^\r]+)\r\n`).FindSubmatch(got)
		d := Decide(argv("HELLO", "2", "SETNAME", "n"), &State{ID: n}, &Policy{Map: m, ServerVersion: string(ver[1])})
		if !bytes.Equal(d.Reply, got) {
			t.Errorf("proxy answers %q, server %q", d.Reply, got)
		}
	})

	lockedPolicy := &Policy{Map: m, Users: map[string]string{"default": "pw"}}
	for _, c := range []serverCase{
		{name: "NOAUTH", args: []string{"GET", "k"}},
		{name: "NOAUTH PING", args: []string{"PING"}},
		{name: "NOAUTH HELLO", args: []string{"HELLO", "2"}},
		{name: "WRONGPASS", args: []string{"AUTH", "bad"}},
		{name: "WRONGPASS user", args: []string{"AUTH", "default", "bad"}},
		{name: "WRONGPASS HELLO", args: []string{"HELLO", "2", "AUTH", "default", "bad"}},
		{name: "AUTH", args: []string{"AUTH", "pw"}},
		{name: "AUTH user", args: []string{"AUTH", "default", "pw"}},
	} {
		t.Run("locked/"+c.name, func(t *testing.T) {
			s := dial(t, locked.Addr)
			d := Decide(argv(c.args...), &State{}, lockedPolicy)
			if got := s.do(argv(c.args...)); !bytes.Equal(d.Reply, got) {
				t.Errorf("proxy answers %q, server %q", d.Reply, got)
			}
		})
	}
}
