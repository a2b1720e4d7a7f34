package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Faults under load (verification.md section 4, "A write is sent at most
// once" in proxy.md): legacy clients enqueue and claim through the proxy
// while its module node (AOF, appendfsync always) is killed, frozen or
// replaced. Every figure the tests measure is logged.

// Bounds of the fault tests.
const (
	faultClients  = 8
	faultLease    = 10 * 60 * 1000 // ms: no lease expires during a test
	callBound     = 3 * time.Second
	resumeBound   = time.Second
	faultUpstream = 400 * time.Millisecond // the proxy's upstream reply timeout
)

// load is the record of a legacy workload.
type load struct {
	q string

	mu       sync.Mutex
	acked    map[string]bool // enqueues answered true
	errored  map[string]bool // enqueues answered an error (outcome unknown)
	existed  []string        // enqueues answered false: the row existed (a resend would do this)
	claimed  map[string]int  // job id -> the client that claimed it
	doubles  []string        // jobs claimed by two clients
	calls    int
	callErrs int
	maxCall  time.Duration
	errTexts map[string]int

	stop chan struct{}
	wg   sync.WaitGroup

	// backoff, when set, is how long a worker pauses after a failed
	// enqueue before its next call, as a worker that retries would.
	backoff time.Duration
}

// startLoad runs faultClients legacy clients against addr until stopped.
func startLoad(t *testing.T, m *shamap.Map, addr, q string) *load {
	t.Helper()
	return startLoadBackoff(t, m, addr, q, 0)
}

// startLoadBackoff is startLoad with workers that pause for backoff after
// a failed enqueue.
func startLoadBackoff(t *testing.T, m *shamap.Map, addr, q string, backoff time.Duration) *load {
	t.Helper()
	l := &load{q: q, acked: map[string]bool{}, errored: map[string]bool{}, claimed: map[string]int{},
		errTexts: map[string]int{}, stop: make(chan struct{}), backoff: backoff}
	for i := range faultClients {
		c, err := legacy.Dial(testCtx(t), legacy.Options{Addr: addr, Map: m})
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		t.Cleanup(c.Close)
		l.wg.Add(1)
		go l.run(i, c)
	}
	return l
}

// run is one client's loop: enqueue a new job, and every third round claim one.
func (l *load) run(i int, c *legacy.Client) {
	defer l.wg.Done()
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return
		default:
		}
		id := fmt.Sprintf("c%d-%06d", i, seq)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		ok, err := c.Enqueue(ctx, l.q, id, "payload")
		l.record(time.Since(start), err)
		if err != nil && l.backoff > 0 {
			time.Sleep(l.backoff) // the worker's own pause before it goes on
		}
		l.mu.Lock()
		switch {
		case err != nil:
			l.errored[id] = true
		case ok:
			l.acked[id] = true
		default:
			l.existed = append(l.existed, id)
		}
		l.mu.Unlock()
		if seq%3 == 2 {
			start = time.Now()
			job, empty, err := c.Claim(ctx, l.q, faultLease)
			l.record(time.Since(start), err)
			if err == nil && !empty {
				l.mu.Lock()
				if prev, ok := l.claimed[job.ID]; ok {
					l.doubles = append(l.doubles, fmt.Sprintf("%s by %d and %d", job.ID, prev, i))
				}
				l.claimed[job.ID] = i
				l.mu.Unlock()
			}
		}
		cancel()
	}
}

// record counts one call and its duration.
func (l *load) record(d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.maxCall = max(l.maxCall, d)
	if err != nil {
		l.callErrs++
		text := err.Error()
		switch {
		case strings.Contains(text, "lost; the command may have been applied"):
			text = "lost in flight"
		case strings.Contains(text, "unavailable"):
			text = "upstream unavailable"
		}
		l.errTexts[text]++
	}
}

// finish stops the load and waits for the clients.
func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

// counts returns how many calls were made and failed so far.
func (l *load) counts() (calls, errs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls, l.callErrs
}

// waitCalls waits until n more calls were made.
func (l *load) waitCalls(t *testing.T, n int) {
	t.Helper()
	c0, _ := l.counts()
	if err := WaitFor(testCtx(t), func() bool { c, _ := l.counts(); return c >= c0+n }); err != nil {
		t.Fatalf("the load made no progress: %v", err)
	}
}

// check verifies the invariants against the node: every acknowledged
// enqueue is there, no job was claimed twice, nothing answered "existed",
// and no call outlived callBound. It returns the number of job rows on the
// node.
func (l *load) check(t *testing.T, n *node.Node) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := n.Client(t)
	ctx := testCtx(t)
	missing := 0
	for id := range l.acked {
		ok, err := c.Do(ctx, c.B().Exists().Key(legacy.JobKey(l.q, id)).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if ok != 1 {
			missing++
			if missing <= 3 {
				t.Errorf("acknowledged enqueue %s is missing", id)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged enqueues are missing", missing, len(l.acked))
	}
	if len(l.doubles) > 0 {
		t.Errorf("jobs claimed by two clients: %v", l.doubles)
	}
	if len(l.existed) > 0 {
		t.Errorf("enqueues of new ids answered 'existed' (applied twice?): %v", l.existed)
	}
	if l.maxCall > callBound {
		t.Errorf("a call took %v (bound %v)", l.maxCall, callBound)
	}
	rows, err := c.Do(ctx, c.B().Keys().Pattern(legacy.JobKey(l.q, "*")).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load: %d calls, %d errors %v; %d enqueues acknowledged, %d errored, %d jobs claimed, %d rows on the node; slowest call %v",
		l.calls, l.callErrs, l.errTexts, len(l.acked), len(l.errored), len(l.claimed), len(rows), l.maxCall.Round(time.Millisecond))
	return len(rows)
}

// faultFront starts a proxy with short fault timeouts and a counted fence.
func faultFront(t *testing.T, m *shamap.Map, n *node.Node) (*front, *atomic.Int64) {
	t.Helper()
	fences := new(atomic.Int64)
	f := startFront(t, m, n.Addr, false, func(o *proxy.Options) {
		o.Upstream.Timeout = faultUpstream
		o.Upstream.DialTimeout = 500 * time.Millisecond
		o.OnConnect = func(ctx context.Context, c fence.Conn) error {
			if _, err := fence.CheckModule(ctx, c, m, false); err != nil {
				return err
			}
			fences.Add(1)
			return nil
		}
	})
	return f, fences
}

// firstSuccess polls the proxy with EXISTS until it is served, and returns
// how long that took.
func firstSuccess(t *testing.T, addr string) time.Duration {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	start := time.Now()
	req := resp.AppendCommand(nil, "EXISTS", "resume-probe")
	for time.Since(start) < 10*time.Second {
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		r, err := resp.ReadReply(br)
		if err != nil {
			t.Fatal(err)
		}
		if string(r) == ":0\r\n" {
			return time.Since(start)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	t.Fatal("the proxy never served again")
	return 0
}

func TestFaultUpstreamKilledUnderLoad(t *testing.T) {
	node.EachServer(t, testFaultUpstreamKilledUnderLoad)
}

func testFaultUpstreamKilledUnderLoad(t *testing.T, server node.Server) {
	m := LoadMap(t)
	opts := node.Options{Role: node.Module, AOF: true}
	n := node.StartT(t, withServer(opts, server))
	f, fences := faultFront(t, m, n)
	l := startLoad(t, m, f.addr, "killed")
	l.waitCalls(t, 200)

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	_, errsBefore := l.counts()
	l.waitCalls(t, 200) // while it is down: errors, fast
	_, errsDown := l.counts()
	if errsDown == errsBefore {
		t.Error("no client saw an error while the upstream was down")
	}
	fencesBefore := fences.Load()
	if err := n.Restart(opts); err != nil {
		t.Fatal(err)
	}
	resume := firstSuccess(t, f.addr)
	t.Logf("service resumed %v after the node answered again (bound %v); the fence ran %d more times", resume.Round(time.Millisecond), resumeBound, fences.Load()-fencesBefore)
	if resume > resumeBound {
		t.Errorf("service resumed %v after the upstream returned, bound %v", resume, resumeBound)
	}
	if fences.Load() == fencesBefore {
		t.Error("service resumed without the fence running again")
	}
	l.waitCalls(t, 200)
	l.finish()
	l.check(t, n)
}

func TestFaultUpstreamFrozenPastTheTimeout(t *testing.T) {
	node.EachServer(t, testFaultUpstreamFrozenPastTheTimeout)
}

func testFaultUpstreamFrozenPastTheTimeout(t *testing.T, server node.Server) {
	m := LoadMap(t)
	opts := node.Options{Role: node.Module, AOF: true}
	n := node.StartT(t, withServer(opts, server))
	f, _ := faultFront(t, m, n)
	l := startLoad(t, m, f.addr, "frozen")
	l.waitCalls(t, 200)

	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = n.Thaw()
		}
	}()
	// Past the proxy's upstream timeout, with commands in flight.
	_, errs0 := l.counts()
	if err := WaitFor(testCtx(t), func() bool { _, e := l.counts(); return e >= errs0+faultClients }); err != nil {
		t.Fatal("no timeout errors while frozen")
	}
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	l.waitCalls(t, 200)
	l.finish()
	rows := l.check(t, n)
	// Every enqueue was sent at most once: acknowledged <= applied <=
	// acknowledged + errored.
	l.mu.Lock()
	acked, errored, lost := len(l.acked), len(l.errored), l.errTexts["lost in flight"]
	l.mu.Unlock()
	t.Logf("frozen: acknowledged %d <= applied %d <= acknowledged + errored %d; %d calls got the in-flight error", acked, rows, acked+errored, lost)
	if rows < acked || rows > acked+errored {
		t.Errorf("applied %d enqueues, acknowledged %d, errored %d", rows, acked, errored)
	}
	if lost == 0 {
		t.Error("no in-flight command got the lost/timeout error")
	}
}

func TestFaultUpstreamReplacedUnderLoad(t *testing.T) {
	node.EachServer(t, testFaultUpstreamReplacedUnderLoad)
}

func testFaultUpstreamReplacedUnderLoad(t *testing.T, server node.Server) {
	m := LoadMap(t)
	for _, repl := range []struct {
		name  string
		opts  node.Options
		setup map[string]int64  // the commands the stand's own setup runs on it
		keys  map[string]string // its keys as the stand leaves them
	}{
		{"scripts node", node.Options{Role: node.Scripts}, map[string]int64{"set": 1}, map[string]string{legacy.VersionKey: legacy.DefaultBrand}},
		{"unbranded bare node", node.Options{Role: node.Bare, NoBrand: true}, map[string]int64{}, map[string]string{}},
	} {
		t.Run(repl.name, func(t *testing.T) {
			n := node.StartT(t, node.Options{Server: server.Path, Role: node.Module})
			f, _ := faultFront(t, m, n)
			l := startLoad(t, m, f.addr, "replaced")
			l.waitCalls(t, 100)
			if err := n.Restart(repl.opts); err != nil {
				t.Fatal(err)
			}
			direct := n.Client(t)
			if err := WaitFor(testCtx(t), func() bool { return errors.Is(f.srv.Readiness(), fence.ErrNotModule) }); err != nil {
				t.Fatalf("readiness %v, want the fence error", f.srv.Readiness())
			}
			l.waitCalls(t, 300) // the clients keep trying against the refused node
			l.finish()
			// Everything the node ever ran, since its start, is the stand's
			// setup and the proxy's fence reads: no client byte.
			if d := clientCommands(delta(repl.setup, commandStats(t, direct))); len(d) != 0 {
				t.Errorf("client commands reached the %s: %v", repl.name, d)
			}
			if got := nodeKeys(t, n); !maps.Equal(got, repl.keys) {
				t.Errorf("the %s holds %v, want %v", repl.name, got, repl.keys)
			}
			l.mu.Lock()
			t.Logf("%d calls, %d errors %v", l.calls, l.callErrs, l.errTexts)
			l.mu.Unlock()
		})
	}
}
