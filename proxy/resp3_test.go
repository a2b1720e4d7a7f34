package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/stand/node"
)

// resp3Steps produce every RESP3 reply type: map, set, double, big number,
// verbatim string, null, boolean and attribute (DEBUG PROTOCOL, with the
// debug command enabled on the node and the deny list opened), and the
// ordinary ones. Pushes are TestRESP3TrackingAndPubSubMatchTheServer's:
// they belong to a bridged connection (DEBUG PROTOCOL push on a shared one
// is not supported: Valkey sends the push after the reply, where no client
// waits for it).
var resp3Steps = [][]string{
	cmd("HELLO", "3"),
	cmd("SET", "k", "v"), cmd("GET", "k"), cmd("GET", "missing"),
	cmd("HSET", "h", "f", "1"), cmd("HGETALL", "h"),
	cmd("SADD", "s", "m"), cmd("SMEMBERS", "s"),
	cmd("ZADD", "z", "1.5", "m"), cmd("ZSCORE", "z", "m"), cmd("ZSCORE", "z", "nope"),
	cmd("LPOP", "nolist", "2"), cmd("INCR", "n"),
	cmd("DEBUG", "PROTOCOL", "string"), cmd("DEBUG", "PROTOCOL", "integer"),
	cmd("DEBUG", "PROTOCOL", "double"), cmd("DEBUG", "PROTOCOL", "bignum"),
	cmd("DEBUG", "PROTOCOL", "null"), cmd("DEBUG", "PROTOCOL", "array"),
	cmd("DEBUG", "PROTOCOL", "set"), cmd("DEBUG", "PROTOCOL", "map"),
	cmd("DEBUG", "PROTOCOL", "attrib"),
	cmd("DEBUG", "PROTOCOL", "verbatim"), cmd("DEBUG", "PROTOCOL", "true"),
	cmd("DEBUG", "PROTOCOL", "false"),
	cmd("MULTI"), cmd("INCR", "n"), cmd("HGETALL", "h"), cmd("EXEC"),
	cmd("HELLO", "2"), cmd("GET", "missing"), cmd("HGETALL", "h"),
	cmd("HELLO", "3"), cmd("GET", "missing"), cmd("RESET"), cmd("GET", "missing"),
}

// TestRESP3RepliesMatchTheServer: a RESP3 client gets every reply type
// byte for byte as from the node directly (HELLO with the proxy's session
// id), HELLO 2 and RESET switch back, and the commands travel on RESP3
// upstream connections kept apart from the RESP2 ones.
func TestRESP3RepliesMatchTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		opts := node.Options{Role: node.Bare, Server: srv.Path, Args: []string{"--enable-debug-command", "yes"}}
		direct := node.StartT(t, opts)
		behind := node.StartT(t, opts)
		h := startProxy(t, behind, func(o *Options) {
			o.Policy.Deny = map[string]bool{}
			o.Policy.Allow = map[string]bool{"DEBUG": true} // DEBUG PROTOCOL makes every reply type
		})
		run := func(addr string) []string {
			c := dial(t, addr)
			var out []string
			for _, st := range resp3Steps {
				r := string(c.do(st...).got)
				out = append(out, helloIDField.ReplaceAllString(r, "id#"))
			}
			return out
		}
		want, got := run(direct.Addr), run(h.addr)
		for i := range resp3Steps {
			if want[i] != got[i] {
				t.Errorf("%q:\n direct %q\n proxy  %q", resp3Steps[i], want[i], got[i])
			}
		}
		// A RESP2 client on the same proxy is unaffected.
		c := h.dial()
		c.do("HGETALL", "h").is("*2\r\n$1\r\nf\r\n$1\r\n1\r\n")
		c.do("GET", "missing").is("$-1\r\n")
	})
}

// TestRESP3LocalReplies: the replies the proxy makes itself take their
// RESP3 form (a nil is `_`, CLIENT INFO a verbatim string); the version
// key, rewrites' shape errors and refusals behave as over RESP2.
func TestRESP3LocalReplies(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("HELLO", "3").hasPrefix("%7\r\n")
	c.do("CLIENT", "GETNAME").is("_\r\n")
	c.do("CLIENT", "SETNAME", "w1").is("+OK\r\n")
	c.do("CLIENT", "GETNAME").is("$2\r\nw1\r\n")
	if r := string(c.do("CLIENT", "INFO").got); !strings.HasPrefix(r, "=") || !strings.Contains(r, "txt:id=") || !strings.Contains(r, " resp=3\n") {
		t.Errorf("CLIENT INFO in RESP3: %q", r)
	}
	c.do("GET", "{emq}:version").is("$12\r\nechomq:4.0.0\r\n")
	c.do("SET", "{emq}:version", "echomq:4.0.0", "NX").is("_\r\n")
	c.do("EVALSHA", strings.Repeat("0", 40), "0").hasPrefix("-EMQREFUSED ")
	c.do("HELLO", "4").is("-NOPROTO unsupported protocol version\r\n")
	// REDIRECT over RESP3 is refused with the reason.
	c.do("CLIENT", "TRACKING", "ON", "REDIRECT", "1").hasPrefix("-EMQREFUSED emqproxy does not bridge CLIENT TRACKING REDIRECT for RESP3 clients")
}

// bridgedRun runs steps on a RESP3 client that tracks and subscribes, with
// another client's write and publish between them, and returns every byte
// the client read. Each step waits for what its last command brings (the
// EXEC's reply and its own invalidation, the message) before the next
// begins, so the order of the stream is the servers' and never the
// machine's speed; a stream that never brings it ends the run at
// testTimeout and fails the comparison.
func bridgedRun(t *testing.T, addr string) string {
	c := dial(t, addr)
	o := dial(t, addr)
	c.do("HELLO", "3")
	var b strings.Builder
	buf := make([]byte, 1<<16)
	upTo := func(what string) {
		_ = c.nc.SetReadDeadline(time.Now().Add(testTimeout))
		for !strings.Contains(b.String(), what) {
			n, err := c.br.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				t.Logf("%s: reading up to %q: %v", addr, what, err)
				return
			}
		}
	}
	c.send(cmd("CLIENT", "TRACKING", "ON"), cmd("SET", "tk", "1"), cmd("GET", "tk"),
		cmd("SUBSCRIBE", "ch"), cmd("GET", "tk"), cmd("MULTI"), cmd("INCR", "tk"), cmd("EXEC"))
	upTo("*1\r\n:2\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntk\r\n")
	o.do("SET", "tk", "5")
	o.do("PUBLISH", "ch", "hi")
	upTo(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n")
	c.send(cmd("PING"), cmd("UNSUBSCRIBE"), cmd("GET", "tk"), cmd("PING"))
	upTo("$1\r\n5\r\n+PONG\r\n")
	return b.String()
}

// TestRESP3TrackingAndPubSubMatchTheServer: a RESP3 client that tracks
// keys and subscribes keeps sending ordinary commands on the same
// connection; replies, invalidations and messages arrive byte for byte in
// the server's order.
func TestRESP3TrackingAndPubSubMatchTheServer(t *testing.T) {
	direct := node.StartT(t, node.Options{Role: node.Bare})
	behind := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, behind, nil)
	want, got := bridgedRun(t, direct.Addr), bridgedRun(t, h.addr)
	if want != got {
		t.Errorf("bridged RESP3 client:\n direct %q\n proxy  %q", want, got)
	}
	if !strings.Contains(got, ">2\r\n$10\r\ninvalidate\r\n") || !strings.Contains(got, ">3\r\n$7\r\nmessage\r\n") {
		t.Errorf("no invalidation or message pushed: %q", got)
	}
}

// TestRESP3BridgedDecisions: a bridged client's commands are still decided:
// a pinned verb is rewritten, an unknown script refused in its place among
// the server's replies, and a refusal inside MULTI makes EXEC answer
// EXECABORT with nothing run.
func TestRESP3BridgedDecisions(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("HELLO", "3")
	c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n")
	c.do("SET", "a", "1").is("+OK\r\n")
	c.do("EVALSHA", strings.Repeat("0", 40), "0").hasPrefix("-EMQREFUSED ")
	c.do("GET", "{emq}:version").is("$12\r\nechomq:4.0.0\r\n")
	c.do("MULTI").is("+OK\r\n")
	c.do("INCR", "a").is("+QUEUED\r\n")
	c.do("EVALSHA", strings.Repeat("0", 40), "0").hasPrefix("-EMQREFUSED ")
	c.do("EXEC").is("-EXECABORT Transaction discarded because of previous errors.\r\n")
	c.do("GET", "a").is("$1\r\n1\r\n")
	c.do("MULTI").is("+OK\r\n")
	c.do("INCR", "a").is("+QUEUED\r\n")
	c.do("EXEC").is("*1\r\n:2\r\n")
	c.read().hasPrefix(">2\r\n$10\r\ninvalidate\r\n") // a, read above, changed
	c.do("HELLO", "2").hasPrefix("-ERR emqproxy: a subscribed or tracking RESP3 client cannot switch protocol")
	c.do("RESET").is("+RESET\r\n")
	c.do("GET", "missing").is("$-1\r\n") // RESP2 again
}

// TestValkeyGoDefaults: valkey-go with its defaults (RESP3, client-side
// caching) connects through the proxy and runs plain commands, a cached
// read that is invalidated, a transaction and pub/sub.
func TestValkeyGoDefaults(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{h.addr}, DialCtxFn: netaddr.DialValkey})
	if err != nil {
		t.Fatalf("valkey-go with defaults: %v", err)
	}
	defer vc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := vc.Do(ctx, vc.B().Set().Key("vk").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	v, err := vc.DoCache(ctx, vc.B().Get().Key("vk").Cache(), time.Minute).ToString()
	if err != nil || v != "1" {
		t.Fatalf("cached GET: %q %v", v, err)
	}
	if err := vc.Do(ctx, vc.B().Set().Key("vk").Value("2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err = vc.DoCache(ctx, vc.B().Get().Key("vk").Cache(), time.Minute).ToString()
		if err == nil && v == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cached GET was never invalidated: %q %v", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rs := vc.DoMulti(ctx, vc.B().Multi().Build(), vc.B().Incr().Key("vn").Build(), vc.B().Incr().Key("vn").Build(), vc.B().Exec().Build())
	if a, err := rs[3].ToArray(); err != nil || len(a) != 2 {
		t.Fatalf("transaction: %v %v", a, err)
	} else if n, _ := a[1].AsInt64(); n != 2 {
		t.Fatalf("transaction result %d, want 2", n)
	}
	got := make(chan string, 1)
	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = vc.Receive(subCtx, vc.B().Subscribe().Channel("vch").Build(), func(m valkey.PubSubMessage) {
			select {
			case got <- m.Message:
			default:
			}
		})
	}()
	for {
		if err := vc.Do(ctx, vc.B().Publish().Channel("vch").Message("hello").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m != "hello" {
				t.Fatalf("message %q", m)
			}
			return
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no message through the proxy")
		}
	}
}

// TestRESP3BadInputMatchesTheServer: RESP3 frame types sent as requests,
// HELLO with a protocol the server does not speak or a wrong password, and
// HELLO 3 before authentication get the server's own answers, and the
// connection lives on as the server's does.
func TestRESP3BadInputMatchesTheServer(t *testing.T) {
	users := node.Options{Role: node.Bare, Password: "pw"}
	direct := node.StartT(t, users)
	behind := node.StartT(t, users)
	h := startProxy(t, behind, func(o *Options) { o.Policy.Users = map[string]string{"default": "pw"} })
	inputs := []string{
		"%1\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"~1\r\n",
		"_\r\n",
		"HELLO 4\r\n",
		"HELLO 3\r\n",
		"HELLO 3 AUTH default wrong\r\n",
		"HELLO 3 AUTH default pw\r\n",
	}
	run := func(addr string) []string {
		var out []string
		for _, in := range inputs {
			// Each on a connection of its own, then AUTH and PING: the
			// replies up to PING's are the input's and AUTH's.
			c := dial(t, addr)
			c.write([]byte(in + "AUTH pw\r\nPING\r\n"))
			var b strings.Builder
			for !strings.HasSuffix(b.String(), "+PONG\r\n") {
				b.Write(c.read().got)
			}
			out = append(out, helloIDField.ReplaceAllString(b.String(), "id#"))
		}
		return out
	}
	want, got := run(direct.Addr), run(h.addr)
	for i := range inputs {
		if want[i] != got[i] {
			t.Errorf("%q:\n direct %q\n proxy  %q", inputs[i], want[i], got[i])
		}
	}
}

// TestRESP3BridgedClientReachesEveryRoute: a tracking client whose
// default route is a scripts node (the bridge's first connection) enqueues
// on a queue routed to the module node: planned and routed as in normal
// service, over a connection of its own to the module node, which tracks
// too; replies keep the client's order and both nodes' invalidations reach
// it.
func TestRESP3BridgedClientReachesEveryRoute(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		r := startRoutedOn(t, srv.Path, func(o *Options) {
			o.Routes = []Route{{Queues: []string{"quotes*"}, Upstream: "module-a"}, {Queues: []string{"*"}, Upstream: "scripts-b"}}
		})
		enq, _ := testPolicy(t).Map.ByName("enqueue")
		c := r.dial()
		c.do("HELLO", "3").hasPrefix("%")
		c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n") // bridged to scripts-b, the default route
		c.do("EVALSHA", enq.SHA, "2", "emq:{quotes}:job:J1", "emq:{quotes}:pending", "J1", "hello").is(":1\r\n")
		if st := nodeStats(t, r.module); st["emq.enqueue"] != 1 {
			t.Errorf("the module node ran emq.enqueue %d times, want 1", st["emq.enqueue"])
		}
		if st := nodeStats(t, r.scripts); st["evalsha"] != 0 {
			t.Errorf("the scripts node ran evalsha %d times", st["evalsha"])
		}
		// A pipeline across both nodes: replies in the client's order.
		nodeDo(t, r.module, "SET", "emq:{quotes}:k", "m")
		nodeDo(t, r.scripts, "SET", "emq:{billing}:k", "s")
		c.send(cmd("GET", "emq:{quotes}:k"), cmd("GET", "emq:{billing}:k"), cmd("GET", "emq:{quotes}:k"), cmd("PING"))
		c.readSkippingPushes().is("$1\r\nm\r\n")
		c.readSkippingPushes().is("$1\r\ns\r\n")
		c.readSkippingPushes().is("$1\r\nm\r\n")
		c.readSkippingPushes().is("+PONG\r\n")
		// Both nodes track the keys the client read there.
		o := r.dial()
		o.do("SET", "emq:{quotes}:k", "m2").is("+OK\r\n")
		o.do("SET", "emq:{billing}:k", "s2").is("+OK\r\n")
		seen := map[string]bool{}
		for len(seen) < 2 {
			p := string(c.read().got)
			for _, k := range []string{"emq:{quotes}:k", "emq:{billing}:k"} {
				if strings.HasPrefix(p, ">2\r\n$10\r\ninvalidate\r\n") && strings.Contains(p, k) {
					seen[k] = true
				}
			}
		}
		// A WATCH binds the bridge to its node until EXEC.
		c.do("WATCH", "emq:{quotes}:w").is("+OK\r\n")
		c.do("MULTI").is("+OK\r\n")
		c.do("SET", "emq:{billing}:x", "1").hasPrefix("-CROSSROUTE 'SET' routes to upstream scripts-b but WATCH pinned the connection to module-a")
		c.do("EXEC").hasPrefix("-EXECABORT")
		c.do("SET", "emq:{billing}:x", "2").is("+OK\r\n")
		if got := nodeDo(t, r.scripts, "GET", "emq:{billing}:x"); got != "$1\r\n2\r\n" {
			t.Errorf("scripts-b has %q", got)
		}
		if got := r.srv.Upstream().Owned(); got == 0 {
			t.Errorf("no owned connection on the first upstream")
		}
	})
}

// TestRESP3SubscriberBackToRESP2: a RESP3 client that subscribed,
// unsubscribed from everything and switched back with HELLO 2 gets RESP2
// replies, as from the server directly: the bridge ends with the switch.
func TestRESP3SubscriberBackToRESP2(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, nil)
		steps := [][]string{
			cmd("HSET", "h", "f", "1", "g", "2"), cmd("HELLO", "3"), cmd("SUBSCRIBE", "ch"), cmd("UNSUBSCRIBE"),
			cmd("HELLO", "2"), cmd("HGETALL", "h"), cmd("GET", "missing"),
		}
		run := func(addr string) []string {
			c := dial(t, addr)
			var out []string
			for _, st := range steps {
				out = append(out, helloIDField.ReplaceAllString(string(c.do(st...).got), "id#"))
			}
			return out
		}
		want, got := run(direct.Addr), run(h.addr)
		for i := range steps {
			if want[i] != got[i] {
				t.Errorf("%q:\n direct %q\n proxy  %q", steps[i], want[i], got[i])
			}
		}
		if got[5] != "*4\r\n$1\r\nf\r\n$1\r\n1\r\n$1\r\ng\r\n$1\r\n2\r\n" {
			t.Errorf("HGETALL after HELLO 2: %q, want a RESP2 array", got[5])
		}
		poll(t, "the bridge's connection to be given back", func() bool { return h.srv.Upstream().Owned() == 0 })
	})
}

// TestRESP3OptInCachingFollowsTheCommandsLeg: a tracking client in OPTIN
// mode (valkey-go's default) sends CLIENT CACHING YES with a read of a key
// routed away from its bridge's first connection: the read is tracked on
// its own node, whose invalidation reaches the client, and the replies keep
// their order.
func TestRESP3OptInCachingFollowsTheCommandsLeg(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		r := startRoutedOn(t, srv.Path, func(o *Options) {
			o.Routes = []Route{{Queues: []string{"quotes*"}, Upstream: "module-a"}, {Queues: []string{"*"}, Upstream: "scripts-b"}}
		})
		nodeDo(t, r.module, "SET", "emq:{quotes}:c", "1")
		c := r.dial()
		c.do("HELLO", "3").hasPrefix("%")
		c.do("CLIENT", "TRACKING", "ON", "OPTIN").is("+OK\r\n") // bridged to scripts-b
		c.send(cmd("CLIENT", "CACHING", "YES"), cmd("GET", "emq:{quotes}:c"))
		c.read().is("+OK\r\n")
		c.read().is("$1\r\n1\r\n")
		r.dial().do("SET", "emq:{quotes}:c", "2").is("+OK\r\n")
		c.read().is(">2\r\n$10\r\ninvalidate\r\n*1\r\n$14\r\nemq:{quotes}:c\r\n")
		// Without CLIENT CACHING YES the read is not tracked.
		c.do("GET", "emq:{quotes}:c").is("$1\r\n2\r\n")
		r.dial().do("SET", "emq:{quotes}:c", "3").is("+OK\r\n")
		c.do("PING").is("+PONG\r\n") // no invalidation before PONG
	})
}
