package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// moveStand is a scripts node (scripts-b, queue billing) and a module node
// (module-a, every other queue), and one configuration file with the
// control table on, for proxies and movers alike.
type moveStand struct {
	dir     string
	cfg     string
	m       *shamap.Map
	scripts *node.Node
	module  *node.Node
	src     valkey.Client // scripts-b directly
	dst     valkey.Client // module-a directly
}

func startMoveStand(t *testing.T, extraUpstreams string) *moveStand {
	t.Helper()
	s := newMoveStand(t)
	s.scripts = node.StartT(t, node.Options{Role: node.Scripts, Brand: s.m.LegacyBrand})
	s.module = node.StartT(t, node.Options{Role: node.Module})
	s.configure(t, extraUpstreams)
	return s
}

// newMoveStand is a stand's directory and pinned map, before its nodes.
func newMoveStand(t *testing.T) *moveStand {
	t.Helper()
	s := &moveStand{dir: t.TempDir()}
	mapPath := filepath.Join(s.dir, "map.yaml")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), mapPath)
	var err error
	if s.m, err = shamap.Load(mapPath); err != nil {
		t.Fatal(err)
	}
	return s
}

// configure opens the clients of the stand's two nodes and writes its
// configuration; extraUpstreams follows scripts-b's role line (more keys
// of scripts-b, then more upstreams).
func (s *moveStand) configure(t *testing.T, extraUpstreams string) {
	t.Helper()
	mapPath := filepath.Join(s.dir, "map.yaml")
	s.src, s.dst = s.scripts.Client(t), s.module.Client(t)
	for _, c := range []valkey.Client{s.src, s.dst} {
		// A mover joining a node without a backlog waits the server's
		// repl-diskless-sync-delay (5 s) for its full synchronisation:
		// nothing a test looks at (the move benchmark sets it back).
		if err := c.Do(context.Background(), c.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", "0").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`map: %q
upstreams:
  module-a:
    address: %q
    role: module
  scripts-b:
    address: %q
    role: scripts
%s
routes:
  - queues: ["billing", "ledger"]
    upstream: scripts-b
  - queues: ["*"]
    upstream: module-a
audit:
  sink: stdout
control:
  enabled: true
  poll: 100ms
  lease: 1s
timeouts:
  drain: 2s
  hold: 5s
`, mapPath, s.module.Addr, s.scripts.Addr, extraUpstreams)
	s.cfg = filepath.Join(s.dir, "emqproxy.yaml")
	if err := os.WriteFile(s.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// proxy starts one more proxy process on the stand's configuration.
func (s *moveStand) proxy(t *testing.T, name string) *proc {
	t.Helper()
	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: filepath.Join(s.dir, name)}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	if p.stderr, err = os.Create(filepath.Join(p.dir, "stderr.log")); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(binary, "serve", "--config", s.cfg, "--listen", p.listen, "--admin.listen", p.admin)
	p.cmd.Stderr, p.cmd.Stdout = p.stderr, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(p.stderr.Name())
			t.Logf("%s log (last 4k):\n%s", name, lastBytes(b, 4096))
		}
	})
	p.waitReady(t, true)
	return p
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// mover runs `emqproxy queue ...` on the stand's configuration.
func (s *moveStand) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"queue"}, append(args, "--config", s.cfg)...)...)
	out, err := cmd.CombinedOutput()
	if st := cmd.ProcessState; st != nil {
		t.Logf("emqproxy queue %s: processor time %v (user %v, system %v)", strings.Join(args, " "), st.UserTime()+st.SystemTime(), st.UserTime(), st.SystemTime())
	}
	t.Logf("emqproxy queue %s:\n%s", strings.Join(args, " "), out)
	return string(out), err
}

// killAfter starts a mover with --stop-after step, waits for it to reach
// the step and kills it (SIGKILL).
func (s *moveStand) killAfter(t *testing.T, step string, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"queue"}, append(args, "--config", s.cfg, "--stop-after", step)...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "stopped after "+step {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			t.Logf("mover killed after %s:\n%s", step, strings.Join(lines, "\n"))
			return
		}
	}
	t.Fatalf("the mover never reached %s:\n%s", step, strings.Join(lines, "\n"))
}

// waitRegistered waits until n proxies hold a lease on the node c.
func waitRegistered(t *testing.T, c valkey.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k, _ := c.Do(context.Background(), c.B().Hlen().Key("{emqproxy}:proxies").Build()).AsInt64()
		if k >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d proxies registered, want %d", k, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dumpQueue returns every key of queue q on c with its DUMP payload.
func dumpQueue(t *testing.T, c valkey.Client, q string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("emq:{"+q+"}:*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Elements {
			p, err := c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
			if err != nil {
				t.Fatalf("DUMP %s: %v", k, err)
			}
			out[k] = p
		}
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}

// inSets counts the job-core sets of q on c that hold id.
func inSets(t *testing.T, c valkey.Client, q, id string) int {
	t.Helper()
	n := 0
	for _, set := range []string{"pending", "delayed", "active", "done", "dead"} {
		_, err := c.Do(context.Background(), c.B().Zscore().Key(legacy.Key(q, set)).Member(id).Build()).AsFloat64()
		if err == nil {
			n++
		} else if !valkey.IsValkeyNil(err) {
			t.Fatal(err)
		}
	}
	return n
}

// workload runs enqueue, claim and complete on queue q through addr until
// stop is closed; it records every acknowledged enqueue.
type workload struct {
	mu        sync.Mutex
	acked     []string
	errs      []error
	tryagains int
	ops       int
}

func (w *workload) run(ctx context.Context, t *testing.T, m *shamap.Map, addr, q, prefix string, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	c, err := legacy.Dial(ctx, legacy.Options{Addr: addr, Map: m, Brand: m.LegacyBrand})
	if err != nil {
		w.fail(err)
		return
	}
	defer c.Close()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		id := fmt.Sprintf("%s-%06d", prefix, i)
		ok, err := c.Enqueue(ctx, q, id, "payload "+id)
		if w.check(err) && ok {
			w.mu.Lock()
			w.acked = append(w.acked, id)
			w.mu.Unlock()
		}
		if i%2 == 0 {
			job, empty, err := c.Claim(ctx, q, 30000)
			if w.check(err) && !empty {
				_, err = c.Complete(ctx, q, job.ID)
				w.check(err)
			}
		}
	}
}

func (w *workload) check(err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops++
	switch {
	case err == nil:
		return true
	case strings.Contains(err.Error(), "TRYAGAIN"):
		w.tryagains++
	default:
		w.errs = append(w.errs, err)
	}
	return false
}

func (w *workload) fail(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

// TestQueueMoveAcrossThreeProxies moves queue billing from the scripts node
// to the module node while legacy clients enqueue, claim and complete on
// it through three proxy processes sharing one configuration, and a
// fourth proxy is stopped (SIGSTOP) past its lease. The mover is killed
// after the copy and the move completed with --resume.
func TestQueueMoveAcrossThreeProxies(t *testing.T) {
	node.Long(t)
	s := startMoveStand(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ps []*proc
	for i := range 4 {
		ps = append(ps, s.proxy(t, fmt.Sprintf("proxy%d", i+1)))
	}
	waitRegistered(t, s.src, 4)
	waitRegistered(t, s.dst, 4)

	// The fourth proxy has a client and a job, then stops past its lease.
	late, err := legacy.Dial(ctx, legacy.Options{Addr: ps[3].listen, Map: s.m, Brand: s.m.LegacyBrand})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if ok, err := late.Enqueue(ctx, "billing", "LATE-before", "p"); err != nil || !ok {
		t.Fatalf("enqueue through proxy4: %v %v", ok, err)
	}
	if err := ps[3].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	billing, quotes := &workload{}, &workload{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range ps[:3] {
		wg.Add(2)
		go billing.run(ctx, t, s.m, p.listen, "billing", fmt.Sprintf("B%d", i+1), stop, &wg)
		go quotes.run(ctx, t, s.m, p.listen, "quotes", fmt.Sprintf("Q%d", i+1), stop, &wg)
	}
	time.Sleep(700 * time.Millisecond)

	// The move, killed once the copy is verified, then resumed.
	began := time.Now()
	s.killAfter(t, "copied", "move", "billing", "--to", "module-a")
	held := dumpQueue(t, s.src, "billing")
	if out, err := s.run(t, "status"); err != nil || !strings.Contains(out, "MOVE billing: scripts-b -> module-a, step copied") {
		t.Errorf("status during the move: %v\n%s", err, out)
	}
	out, err := s.run(t, "move", "billing", "--resume")
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	for _, want := range []string{"moved billing from scripts-b to module-a", "proxies acknowledged: 3", "proxies waited out (lease expired): 1",
		"connections of 1 proxies waited out on scripts-b"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	t.Logf("hold to flip: %v", time.Since(began))
	time.Sleep(700 * time.Millisecond)

	// The stopped proxy continues: it holds until it renews, then routes
	// to the target.
	if err := ps[3].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if ok, err := late.Enqueue(ctx, "billing", "LATE-after", "p"); err != nil || !ok {
		t.Errorf("enqueue through proxy4 after the move: %v %v", ok, err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	for _, w := range []*workload{billing, quotes} {
		for _, err := range w.errs {
			t.Errorf("client error: %v", err)
		}
	}
	t.Logf("billing: %d ops, %d acknowledged enqueues, %d TRYAGAIN; quotes: %d ops", billing.ops, len(billing.acked), billing.tryagains, quotes.ops)
	if len(billing.acked) < 10 || quotes.ops < 10 {
		t.Errorf("too little work: billing %d enqueues, quotes %d ops", len(billing.acked), quotes.ops)
	}

	// Nothing of billing changed on the source once the copy was taken.
	if after := dumpQueue(t, s.src, "billing"); !mapsEqual(after, held) {
		t.Errorf("the source's billing keys changed after the copy: %d keys then, %d now", len(held), len(after))
	}
	if _, ok := held[legacy.JobKey("billing", "LATE-before")]; !ok {
		t.Errorf("the job enqueued before the move is not in the copy")
	}
	// Every acknowledged enqueue is on the target exactly once.
	for _, id := range append(slices.Clone(billing.acked), "LATE-before", "LATE-after") {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("job %s is in %d sets of the target", id, n)
		}
	}
	if n := inSets(t, s.src, "billing", "LATE-after"); n != 0 {
		t.Errorf("the stopped proxy wrote LATE-after to the source")
	}
	// Every proxy routes billing to the target now.
	for i, p := range ps {
		c, err := legacy.Dial(ctx, legacy.Options{Addr: p.listen, Map: s.m, Brand: s.m.LegacyBrand})
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("AFTER-%d", i+1)
		if ok, err := c.Enqueue(ctx, "billing", id, "p"); err != nil || !ok {
			t.Errorf("proxy%d: enqueue after the move: %v %v", i+1, ok, err)
		}
		c.Close()
		if inSets(t, s.dst, "billing", id) != 1 || inSets(t, s.src, "billing", id) != 0 {
			t.Errorf("proxy%d did not route billing to module-a", i+1)
		}
		if e := p.metric(t, "emqproxy_control_epoch"); e < 2 {
			t.Errorf("proxy%d applied epoch %v", i+1, e)
		}
	}
	if out, err := s.run(t, "status"); err != nil || !strings.Contains(out, "billing: owned module-a") || strings.Contains(out, "MOVE billing") {
		t.Errorf("status after the move: %v\n%s", err, out)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestQueueMoveRefusalsAndAbort refuses moves to a target that is
// unreachable, not fenced, not the configured role, or already has keys of
// the queue, before anything is held; then rolls back a move killed after
// its hold with --abort.
func TestQueueMoveRefusalsAndAbort(t *testing.T) {
	bare := node.StartT(t, node.Options{Role: node.Bare})
	wrong := node.StartT(t, node.Options{Role: node.Scripts})
	s := startMoveStand(t, fmt.Sprintf(`  gone-c:
    address: %q
    role: module
  bare-d:
    address: %q
    role: scripts
  wrong-e:
    address: %q
    role: module`, freeAddr(t), bare.Addr, wrong.Addr))
	ctx := context.Background()
	if err := s.src.Do(ctx, s.src.B().Hset().Key(legacy.JobKey("billing", "J1")).FieldValue().FieldValue("state", "pending").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// --deadline 0: the first attempt's refusal (without it the command
	// waits for gone-c to come back: TestQueueMoveWaitsForAnUpstreamDownAtTheStart).
	if out, err := s.run(t, "move", "billing", "--to", "gone-c", "--deadline", "0"); err == nil || !strings.Contains(out, "target gone-c is unreachable") {
		t.Errorf("move to gone-c: %v, want a refusal with %q", err, "target gone-c is unreachable")
	}
	// Any unreachable upstream refuses a move: the entry that decides the
	// queue's owner may be on it alone (control.Mover.reachable).
	if out, err := s.run(t, "move", "billing", "--to", "bare-d", "--deadline", "0"); err == nil || !strings.Contains(out, "upstream gone-c is unreachable") {
		t.Errorf("move to bare-d with gone-c unreachable: %v, want a refusal naming gone-c", err)
	}
	b, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	gone := regexp.MustCompile(`(?m)^  gone-c:\n.*\n.*\n`)
	if err := os.WriteFile(s.cfg, gone.ReplaceAll(b, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ to, want string }{
		{"bare-d", "target bare-d: not fenced as a scripts node"},
		{"wrong-e", "target wrong-e: not fenced as a module node"},
		{"nowhere", `--to "nowhere" is not an upstream of the configuration`},
		{"scripts-b", "queue billing is already served by scripts-b"},
	} {
		out, err := s.run(t, "move", "billing", "--to", tc.to)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("move to %s: %v, want a refusal with %q", tc.to, err, tc.want)
		}
	}
	if err := s.dst.Do(ctx, s.dst.B().Set().Key(legacy.Key("billing", "paused")).Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if out, err := s.run(t, "move", "billing", "--to", "module-a"); err == nil || !strings.Contains(out, "target module-a already has keys of queue billing") {
		t.Errorf("move onto keys: %v", err)
	}
	for _, c := range []valkey.Client{s.src, s.dst} {
		if n, _ := c.Do(ctx, c.B().Exists().Key("{emqproxy}:queues").Build()).AsInt64(); n != 0 {
			t.Errorf("a refused move wrote the control table")
		}
	}
	if err := s.dst.Do(ctx, s.dst.B().Del().Key(legacy.Key("billing", "paused")).Build()).Error(); err != nil {
		t.Fatal(err)
	}

	// Abort: killed after the copy, rolled back; the source serves again.
	s2 := startMoveStand(t, "")
	p := s2.proxy(t, "proxy")
	waitRegistered(t, s2.src, 1)
	c, err := legacy.Dial(ctx, legacy.Options{Addr: p.listen, Map: s2.m, Brand: s2.m.LegacyBrand})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, err := c.Enqueue(ctx, "billing", "A1", "p"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	s2.killAfter(t, "copied", "move", "billing", "--to", "module-a")
	if n := inSets(t, s2.dst, "billing", "A1"); n != 1 {
		t.Fatalf("the copy is not on the target")
	}
	if out, err := s2.run(t, "move", "billing", "--abort"); err != nil || !strings.Contains(out, "aborted: billing released on scripts-b") {
		t.Fatalf("abort: %v", err)
	}
	if ok, err := c.Enqueue(ctx, "billing", "A2", "p"); err != nil || !ok {
		t.Fatalf("enqueue after the abort: %v %v", ok, err)
	}
	if inSets(t, s2.src, "billing", "A2") != 1 || len(dumpQueue(t, s2.dst, "billing")) != 0 {
		t.Errorf("after the abort billing is not on the source alone")
	}
	if out, err := s2.run(t, "move", "billing", "--resume"); err == nil || !strings.Contains(out, "no move in progress") {
		t.Errorf("resume after abort: %v", err)
	}
	// A move in one go, deleting the source's keys.
	out, err := s2.run(t, "move", "billing", "--to", "module-a", "--delete-source")
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	for _, want := range []string{"moved billing from scripts-b to module-a", "keys copied: 3", "jobs: pending 2", "proxies acknowledged: 1", "source keys deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if n := len(dumpQueue(t, s2.src, "billing")); n != 0 {
		t.Errorf("%d keys of billing left on the source", n)
	}
	if ok, err := c.Enqueue(ctx, "billing", "A3", "p"); err != nil || !ok || inSets(t, s2.dst, "billing", "A3") != 1 {
		t.Errorf("enqueue after the move did not reach module-a: %v %v", ok, err)
	}
	var ee *exec.ExitError
	if _, err := s2.run(t, "move", "billing", "--resume", "--abort"); !errors.As(err, &ee) {
		t.Errorf("--resume --abort: %v", err)
	}
}
