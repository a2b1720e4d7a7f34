package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestOrderAsOnANode: what a server's own test suite checks of the order of
// replies and pushes around a transaction of a subscribed RESP3 client (the
// RESP3 bridge), and of a blocking command pipelined after a write (the
// blocking path), reaches the client through the proxy exactly as from
// the node: each scenario runs against the node and through the proxy,
// and the client's transcripts must be equal, byte for byte.
//
// The scenarios are Valkey's "publish to self inside multi", "unsubscribe
// inside multi, and publish to self", "Unblock fairness is kept while
// pipelining" and "Unblock fairness is kept during nested unblock". Its
// fifth, "publish to self inside script", cannot run through the proxy by
// design: an unpinned script is refused, and a pinned read script runs as
// EVALSHA_RO or EVAL_RO, where the server refuses PUBLISH (may-replicate);
// TestPublishToSelfInsideScript holds what the client sees instead.
func TestOrderAsOnANode(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		n := node.StartT(t, node.Options{Role: node.Module, Server: srv.Path})
		h := startProxy(t, n, nil)
		for _, sc := range []struct {
			name string
			run  func(t *testing.T, addr string) []string
			want string // a part of the node's transcript, so the scenario checks what it claims to
		}{
			{"publish to self inside multi", publishInMulti, "EXEC: *4\r\n$3\r\nabc\r\n"},
			{"unsubscribe inside multi, and publish to self", unsubscribeInMulti, "unsubscribe\r\n$3\r\nbaz\r\n:1\r\n$3\r\ndef\r\n"},
			{"unblock fairness while pipelining", unblockPipelined, "LPUSH: :1\r\n"},
			{"unblock fairness during nested unblock", unblockNested, "BLMPOP: *2\r\n$5\r\nl3{t}\r\n"},
		} {
			t.Run(sc.name, func(t *testing.T) {
				// Each run's clients close before the next starts, and the
				// node has dropped them (no subscriber of foo is left).
				run := func(label, addr string) (got string) {
					nodeDo(t, n, "FLUSHALL")
					t.Run(label, func(t *testing.T) { got = strings.Join(sc.run(t, addr), "\n") })
					poll(t, "the node drops the run's subscribers", func() bool {
						return nodeDo(t, n, "PUBSUB", "NUMSUB", "foo") == "*2\r\n$3\r\nfoo\r\n:0\r\n"
					})
					return got
				}
				direct := run("node", n.Addr)
				if !strings.Contains(direct, sc.want) {
					t.Fatalf("the node's transcript lacks %q:\n%s", sc.want, direct)
				}
				if via := run("proxy", h.addr); via != direct {
					t.Errorf("through the proxy:\n%q\nfrom the node:\n%q", via, direct)
				}
			})
		}
	})
}

// transcript records what a client reads, each line labelled.
type transcript []string

func (tr *transcript) add(label string, r reply) { *tr = append(*tr, label+": "+string(r.got)) }

func publishInMulti(t *testing.T, addr string) []string {
	var tr transcript
	c := dial(t, addr)
	c.do("HELLO", "3")
	c.send(cmd("SUBSCRIBE", "foo"))
	tr.add("SUBSCRIBE", c.read())
	for _, a := range [][]string{{"MULTI"}, {"PING", "abc"}, {"PUBLISH", "foo", "bar"}, {"PUBLISH", "foo", "vaz"}, {"PING", "def"}, {"EXEC"}} {
		tr.add(a[0], c.do(a...))
	}
	tr.add("next", c.read())
	tr.add("next", c.read())
	return tr
}

func unsubscribeInMulti(t *testing.T, addr string) []string {
	var tr transcript
	c := dial(t, addr)
	c.do("HELLO", "3")
	c.send(cmd("SUBSCRIBE", "foo", "bar", "baz"))
	for range 3 {
		tr.add("SUBSCRIBE", c.read())
	}
	for _, a := range [][]string{{"MULTI"}, {"PING", "abc"}, {"UNSUBSCRIBE", "bar"}, {"UNSUBSCRIBE", "baz"}, {"PING", "def"}, {"EXEC"}} {
		tr.add(a[0], c.do(a...))
	}
	c.send(cmd("PUBLISH", "foo", "vaz"))
	tr.add("PUBLISH", c.read())
	tr.add("next", c.read())
	// Subscribed to one channel still (the proxy keeps its count from
	// the confirmations in EXEC's reply): UNSUBSCRIBE's confirmation ends
	// it, and a client subscribed to nothing may go back to RESP2.
	tr.add("UNSUBSCRIBE", c.do("UNSUBSCRIBE"))
	tr.add("HELLO 2", c.do("HELLO", "2"))
	return tr[:len(tr)-1] // HELLO's reply names the server's connection id
}

// blockedClients waits until the node counts n blocked clients (INFO
// clients, read through addr as a client would).
func blockedClients(t *testing.T, c *client, n int) {
	t.Helper()
	want := "blocked_clients:" + strconv.Itoa(n) + "\r\n"
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(c.do("INFO", "clients").got), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the node never counted %d blocked clients", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func unblockPipelined(t *testing.T, addr string) []string {
	var tr transcript
	r, rd1, rd2 := dial(t, addr), dial(t, addr), dial(t, addr)
	rd1.send(cmd("BLPOP", "mylist", "0"))
	blockedClients(t, r, 1)
	// A push and a blocking pop in one write: the first client blocked is
	// served, and the push's reply comes while the pop waits.
	rd2.write([]byte("LPUSH mylist 1\r\nBLPOP mylist 0\r\n"))
	tr.add("BLPOP 1", rd1.read())
	tr.add("LPUSH", rd2.read())
	blockedClients(t, r, 1)
	tr.add("LPUSH 2", r.do("LPUSH", "mylist", "2"))
	tr.add("BLPOP 2", rd2.read())
	blockedClients(t, r, 0)
	return tr
}

func unblockNested(t *testing.T, addr string) []string {
	var tr transcript
	r, rd1, rd2, rd3 := dial(t, addr), dial(t, addr), dial(t, addr), dial(t, addr)
	rd1.send(cmd("BRPOPLPUSH", "l1{t}", "l3{t}", "0"))
	blockedClients(t, r, 1)
	rd2.send(cmd("BLPOP", "l2{t}", "0"))
	blockedClients(t, r, 2)
	rd3.send(cmd("BLMPOP", "0", "2", "l2{t}", "l3{t}", "LEFT", "COUNT", "1"))
	blockedClients(t, r, 3)
	for _, a := range [][]string{{"MULTI"}, {"LPUSH", "l1{t}", "1"}, {"LPUSH", "l2{t}", "2"}, {"EXEC"}} {
		tr.add(a[0], r.do(a...))
	}
	blockedClients(t, r, 0)
	tr.add("BRPOPLPUSH", rd1.read())
	tr.add("BLPOP", rd2.read())
	tr.add("BLMPOP", rd3.read())
	return tr
}

// TestPublishToSelfInsideScript is Valkey's fifth scenario, "publish to
// self inside script": a subscribed RESP3 client runs a script that
// publishes to its own channel. On a node the client gets the message and
// the script's reply. Through the proxy the script is not pinned, so it is
// refused and never reaches the node (no message comes), and the client's
// subscription goes on as on the node: its next PUBLISH to itself reads
// exactly as the node's does after the script.
func TestPublishToSelfInsideScript(t *testing.T) {
	const body = "redis.call('publish', 'foo', 'bar')"
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		n := node.StartT(t, node.Options{Role: node.Module, Server: srv.Path})
		h := startProxy(t, n, nil)
		// after is what the client reads once the script's exchange is
		// over: a PUBLISH to itself, its reply and its message, and a PING.
		after := func(c *client) string {
			var tr transcript
			c.send(cmd("PUBLISH", "foo", "vaz"))
			tr.add("PUBLISH", c.read())
			tr.add("next", c.read())
			tr.add("PING", c.do("PING", "end"))
			return strings.Join(tr, "\n")
		}
		subscribed := func(addr string) *client {
			c := dial(t, addr)
			c.do("HELLO", "3")
			c.do("SUBSCRIBE", "foo").is(">3\r\n$9\r\nsubscribe\r\n$3\r\nfoo\r\n:1\r\n")
			return c
		}

		c := subscribed(n.Addr)
		c.send(cmd("EVAL", body, "0"))
		script := string(c.read().got) + string(c.read().got)
		if !strings.Contains(script, ">3\r\n$7\r\nmessage\r\n$3\r\nfoo\r\n$3\r\nbar\r\n") {
			t.Fatalf("on the node, the script's message did not come: %q", script)
		}
		direct := after(c)
		_ = c.nc.Close()
		poll(t, "the node drops the direct client's subscription", func() bool {
			return nodeDo(t, n, "PUBSUB", "NUMSUB", "foo") == "*2\r\n$3\r\nfoo\r\n:0\r\n"
		})

		c = subscribed(h.addr)
		c.do("EVAL", body, "0").is("-EMQREFUSED script " + sha1hex(body) + " is not pinned; emqproxy does not run unpinned scripts\r\n")
		if via := after(c); via != direct {
			t.Errorf("after the refused script, through the proxy:\n%q\nfrom the node after the script:\n%q", via, direct)
		}
	})
}
