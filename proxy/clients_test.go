package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// localStep is one connection-local command of the fidelity corpus.
// shape: compare with numbers masked (ids); fields: compare CLIENT INFO's
// field names only.
type localStep struct {
	args   []string
	shape  bool
	fields bool
}

// infoFields returns the field names of a CLIENT INFO reply, in order.
func infoFields(r []byte) string {
	s := string(r)
	if i := strings.Index(s, "\r\n"); i >= 0 {
		s = s[i+2:]
	}
	var names []string
	for _, kv := range strings.Fields(s) {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return strings.Join(names, " ")
}

func TestConnectionLocalCommandsMatchTheServer(t *testing.T) {
	direct := node.StartT(t, node.Options{Role: node.Bare})
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	steps := []localStep{
		{args: cmd("PING")}, {args: cmd("ping", "hello world")}, {args: cmd("PING", "")},
		{args: cmd("PING", "a", "b")}, {args: cmd("ECHO", "\x00bin\r\n")}, {args: cmd("ECHO")},
		{args: cmd("HELLO", "2"), shape: true}, {args: cmd("HELLO", "2", "SETNAME", "lib-a"), shape: true},
		{args: cmd("CLIENT", "GETNAME")}, {args: cmd("HELLO", "x")}, {args: cmd("HELLO", "2", "SETNAME", "bad name")},
		{args: cmd("HELLO", "2", "BOGUS")},
		{args: cmd("CLIENT", "SETNAME", "worker-1")}, {args: cmd("CLIENT", "GETNAME")},
		{args: cmd("CLIENT", "SETNAME", "has space")}, {args: cmd("CLIENT", "SETNAME", "")},
		{args: cmd("CLIENT", "GETNAME")}, {args: cmd("CLIENT", "SETNAME")},
		{args: cmd("CLIENT", "ID"), shape: true}, {args: cmd("CLIENT", "INFO"), fields: true},
		{args: cmd("CLIENT", "NO-EVICT", "on")}, {args: cmd("CLIENT", "NO-EVICT", "maybe")},
		{args: cmd("SELECT", "0")}, {args: cmd("SELECT", "x")},
		{args: cmd("MULTI")}, {args: cmd("PING")}, {args: cmd("ECHO", "q")}, {args: cmd("SELECT", "0")}, {args: cmd("EXEC")},
		{args: cmd("CLIENT", "SETNAME", "before-reset")}, {args: cmd("RESET")}, {args: cmd("CLIENT", "GETNAME")},
		{args: cmd("RESET", "x")},
		{args: cmd("QUIT")},
	}
	run := func(addr string) []string {
		c := dial(t, addr)
		var out []string
		for _, st := range steps {
			r := c.do(st.args...).got
			switch {
			case st.fields:
				out = append(out, infoFields(r))
			case st.shape:
				out = append(out, digits.ReplaceAllString(string(r), "#"))
			default:
				out = append(out, string(r))
			}
		}
		c.closed() // after QUIT
		return out
	}
	want, got := run(direct.Addr), run(h.addr)
	for i := range steps {
		if want[i] != got[i] {
			t.Errorf("%q:\n direct %q\n proxy  %q", steps[i].args, want[i], got[i])
		}
	}
	// Where the proxy differs on purpose: another database, and commands
	// after QUIT in the same write.
	c := h.dial()
	c.do("SELECT", "1").is("-ERR SELECT is not allowed: emqproxy serves database 0 only\r\n")
	c.do("HELLO", "4").is("-NOPROTO unsupported protocol version\r\n")
	if r, err := node.RawDo(direct.Addr, "HELLO", "4"); err != nil || string(r) != "-NOPROTO unsupported protocol version\r\n" {
		t.Errorf("the server's own NOPROTO text is %q (%v)", r, err)
	}
	c.send(cmd("SET", "after-quit", "0"), cmd("QUIT"), cmd("SET", "after-quit", "1"))
	c.read().is("+OK\r\n")
	c.read().is("+OK\r\n")
	c.closed()
	dial(t, n.Addr).do("GET", "after-quit").is("$1\r\n0\r\n")
	// CLIENT SETNAME never reached the shared connection.
	if list := string(dial(t, n.Addr).do("CLIENT", "LIST").got); strings.Contains(list, "worker-1") || strings.Contains(list, "lib-a") {
		t.Errorf("a client name leaked upstream:\n%s", list)
	}
}

// valkeyClient is a valkey-go client to addr as the project's tools make
// them (RESP2, no client-side caching), closed at cleanup.
func valkeyClient(t testing.TB, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DialCtxFn: netaddr.DialValkey, AlwaysRESP2: true, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey-go to %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// watchExec runs WATCH key, lets other change it, then MULTI SET EXEC on
// one dedicated connection, and returns EXEC's result.
func watchExec(ctx context.Context, c valkey.Client, other func(), key string) valkey.ValkeyResult {
	var res valkey.ValkeyResult
	_ = c.Dedicated(func(d valkey.DedicatedClient) error {
		_ = d.Do(ctx, d.B().Watch().Key(key).Build())
		other()
		rs := d.DoMulti(ctx, d.B().Multi().Build(), d.B().Set().Key(key).Value("mine").Build(), d.B().Exec().Build())
		res = rs[2]
		return nil
	})
	return res
}

func TestWatchRaceWithValkeyGo(t *testing.T) {
	direct := node.StartT(t, node.Options{Role: node.Bare})
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	for _, target := range []struct{ name, addr string }{{"direct", direct.Addr}, {"proxy", h.addr}} {
		a, b := valkeyClient(t, target.addr), valkeyClient(t, target.addr)
		// Changed between WATCH and EXEC: EXEC fails with a null reply.
		res := watchExec(ctx, a, func() {
			if err := b.Do(ctx, b.B().Set().Key("w").Value("theirs").Build()).Error(); err != nil {
				t.Errorf("%s: SET: %v", target.name, err)
			}
		}, "w")
		if !valkey.IsValkeyNil(res.Error()) {
			t.Errorf("%s: EXEC after a change: %v, want nil", target.name, res.Error())
		}
		// Unchanged: EXEC applies.
		res = watchExec(ctx, a, func() {}, "w")
		if arr, err := res.ToArray(); err != nil || len(arr) != 1 {
			t.Errorf("%s: EXEC unchanged: %v %v", target.name, arr, err)
		}
		// Concurrent optimistic increments: none lost, some retried.
		const workers, each = 4, 50
		var retries atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := valkeyClient(t, target.addr)
				for range each {
					for {
						var applied bool
						err := c.Dedicated(func(d valkey.DedicatedClient) error {
							if err := d.Do(ctx, d.B().Watch().Key("ctr").Build()).Error(); err != nil {
								return err
							}
							v, err := d.Do(ctx, d.B().Get().Key("ctr").Build()).AsInt64()
							if err != nil && !valkey.IsValkeyNil(err) {
								return err
							}
							rs := d.DoMulti(ctx, d.B().Multi().Build(),
								d.B().Set().Key("ctr").Value(strconv.FormatInt(v+1, 10)).Build(), d.B().Exec().Build())
							if err := rs[2].Error(); valkey.IsValkeyNil(err) {
								return nil
							} else if err != nil {
								return err
							}
							applied = true
							return nil
						})
						if err != nil {
							errs <- err
							return
						}
						if applied {
							break
						}
						retries.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("%s: %v", target.name, err)
		}
		v, err := a.Do(ctx, a.B().Get().Key("ctr").Build()).AsInt64()
		if err != nil || v != workers*each {
			t.Errorf("%s: counter %d (%v), want %d", target.name, v, err, workers*each)
		}
		t.Logf("%s: %d increments by %d clients, %d EXECs failed on a changed key and were retried", target.name, v, workers, retries.Load())
	}
}

// cliSession is redis-cli reading commands from a pipe, one line at a time.
type cliSession struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Reader
	cmd *exec.Cmd
}

func startCLI(t *testing.T, cli, addr string) *cliSession {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	c := exec.Command(cli, "-h", host, "-p", port)
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	s := &cliSession{t: t, in: in, out: bufio.NewReader(out), cmd: c}
	t.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(testTimeout):
			_ = c.Process.Kill()
			<-done
		}
	})
	return s
}

// line sends one command line and reads n lines of output.
func (s *cliSession) line(cmdline string, n int) []string {
	s.t.Helper()
	if _, err := io.WriteString(s.in, cmdline+"\n"); err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for range n {
		l, err := s.out.ReadString('\n')
		if err != nil {
			s.t.Fatalf("redis-cli output after %q: %v", cmdline, err)
		}
		out = append(out, strings.TrimSuffix(l, "\n"))
	}
	return out
}

func TestWatchRaceWithRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is not installed")
	}
	direct := node.StartT(t, node.Options{Role: node.Bare})
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	run := func(addr string) []string {
		s := startCLI(t, cli, addr)
		other := dial(t, addr)
		var out []string
		out = append(out, s.line("WATCH rk", 1)...)
		other.do("SET", "rk", "theirs").is("+OK\r\n") // between WATCH and EXEC
		out = append(out, s.line("MULTI", 1)...)
		out = append(out, s.line("SET rk mine", 1)...)
		out = append(out, s.line("EXEC", 1)...) // the null reply: an empty line
		out = append(out, s.line("GET rk", 1)...)
		out = append(out, s.line("WATCH rk", 1)...)
		out = append(out, s.line("MULTI", 1)...)
		out = append(out, s.line("SET rk mine", 1)...)
		out = append(out, s.line("EXEC", 1)...)
		out = append(out, s.line("GET rk", 1)...)
		return out
	}
	want, got := run(direct.Addr), run(h.addr)
	if strings.Join(want, "|") != strings.Join(got, "|") {
		t.Errorf("redis-cli transcripts differ:\n direct %q\n proxy  %q", want, got)
	}
	if want[3] != "" || want[4] != "theirs" || want[9] != "mine" {
		t.Errorf("unexpected transcript %q", want)
	}
}

// opsFor runs clients that each INCR their own key for d and returns
// the commands answered per second.
func opsFor(t *testing.T, addr string, clients int, d time.Duration) float64 {
	t.Helper()
	var total atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	errs := make(chan error, clients)
	for i := range clients {
		c := dial(t, addr)
		key := "ops-" + strconv.Itoa(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := resp.AppendCommand(nil, "INCR", key)
			for time.Now().Before(stop) {
				if _, err := c.nc.Write(cmd); err != nil {
					errs <- err
					return
				}
				r, err := resp.ReadReply(c.br)
				if err != nil || r[0] != ':' {
					errs <- errors.Join(err, errors.New(string(r)))
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("load client: %v", err)
	}
	return float64(total.Load()) / d.Seconds()
}

func TestBlockedClientsDoNotSlowOthers(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	const clients, blocked, cycles = 4, 20, 3
	const window = 400 * time.Millisecond
	_ = opsFor(t, h.addr, clients, 200*time.Millisecond) // warm up
	admin := dial(t, n.Addr)
	// Without and with blocked clients, measured one right after the other
	// in each of three cycles, the ratio taken per cycle: a machine shared
	// with other tests drifts between windows, and a pair's ratio is what
	// its drift changes least. The median ratio is judged.
	var ratios []float64
	for cycle := range cycles {
		without := opsFor(t, h.addr, clients, window)
		var waiting []*client
		for i := range blocked {
			c := h.dial()
			c.send(cmd("BLPOP", "bq-"+strconv.Itoa(cycle)+"-"+strconv.Itoa(i), "0"))
			waiting = append(waiting, c)
		}
		poll(t, "every BLPOP to block upstream", func() bool {
			return strings.Contains(string(admin.do("INFO", "clients").got), "blocked_clients:"+strconv.Itoa(blocked)+"\r\n")
		})
		during := opsFor(t, h.addr, clients, window)
		if !strings.Contains(string(admin.do("INFO", "clients").got), "blocked_clients:"+strconv.Itoa(blocked)+"\r\n") {
			t.Error("the BLPOPs stopped blocking during the measurement")
		}
		t.Logf("cycle %d, %d clients through the proxy: %.0f ops/s without blocked clients, %.0f ops/s with %d BLPOPs blocked (%.0f%%)",
			cycle, clients, without, during, blocked, 100*during/without)
		ratios = append(ratios, during/without)
		// Each blocked client gets its element, in its own order.
		for i, c := range waiting {
			key := "bq-" + strconv.Itoa(cycle) + "-" + strconv.Itoa(i)
			admin.do("RPUSH", key, "v").is(":1\r\n")
			c.read().is("*2\r\n$" + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n$1\r\nv\r\n")
			c.do("PING").is("+PONG\r\n")
			_ = c.nc.Close()
		}
	}
	slices.Sort(ratios)
	if median := ratios[cycles/2]; median < 0.5 {
		t.Errorf("throughput with clients blocked fell to %.2f of what it was without (median of the cycles' ratios %.2f)", median, ratios)
	}
}

func TestValkeyGoSubscriber(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	sub := valkeyClient(t, h.addr)
	publisher := n.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const total = 2000
	got := make(chan valkey.PubSubMessage, total)
	subscribed := make(chan struct{})
	var ready sync.Once
	done := make(chan error, 1)
	go func() {
		done <- sub.Receive(ctx, sub.B().Psubscribe().Pattern("vk.*").Build(), func(m valkey.PubSubMessage) {
			if m.Channel == "vk.ready" { // the poll below may publish several
				ready.Do(func() { close(subscribed) })
				return
			}
			got <- m
		})
	}()
	// Publish until the subscription is in place.
	poll(t, "the valkey-go subscription", func() bool {
		_ = publisher.Do(ctx, publisher.B().Publish().Channel("vk.ready").Message("x").Build())
		select {
		case <-subscribed:
			return true
		default:
			return false
		}
	})
	cmds := make(valkey.Commands, 0, total)
	for i := range total {
		cmds = append(cmds, publisher.B().Publish().Channel("vk.jobs").Message("m"+strconv.Itoa(i)).Build())
	}
	for _, r := range publisher.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range total {
		select {
		case m := <-got:
			if m.Pattern != "vk.*" || m.Channel != "vk.jobs" || m.Message != "m"+strconv.Itoa(i) {
				t.Fatalf("message %d: %+v", i, m)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages", i, total)
		}
	}
	cancel()
	<-done
}
