package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// fillQueue writes n pending jobs of queue q directly on c (rows and the
// pending set) and returns their ids.
func fillQueue(t *testing.T, c valkey.Client, q string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for lo := 0; lo < n; lo += 1000 {
		var cmds valkey.Commands
		z := c.B().Zadd().Key(legacy.Key(q, "pending")).ScoreMember()
		for i := lo; i < min(lo+1000, n); i++ {
			id := fmt.Sprintf("P%07d", i)
			ids = append(ids, id)
			cmds = append(cmds, c.B().Hset().Key(legacy.JobKey(q, id)).FieldValue().FieldValue("state", "pending").
				FieldValue("attempts", "0").FieldValue("payload", "payload of "+id).Build())
			z = z.ScoreMember(0, id)
		}
		cmds = append(cmds, z.Build())
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

// asyncMover is a mover process whose output is read line by line.
type asyncMover struct {
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	out   []string
	done  chan error
}

func (s *moveStand) start(t *testing.T, args ...string) *asyncMover {
	t.Helper()
	m := &asyncMover{lines: make(chan string, 1024), done: make(chan error, 1)}
	m.cmd = exec.Command(binary, append([]string{"queue"}, append(args, "--config", s.cfg)...)...)
	pipe, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m.cmd.Stderr = m.cmd.Stdout
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			m.mu.Lock()
			m.out = append(m.out, sc.Text())
			m.mu.Unlock()
			select {
			case m.lines <- sc.Text():
			default:
			}
		}
		close(m.lines)
		m.done <- m.cmd.Wait()
	}()
	return m
}

// waitLine waits for a line of the mover's output that contains s.
func (m *asyncMover) waitLine(t *testing.T, s string) {
	t.Helper()
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-m.lines:
			if !ok {
				t.Fatalf("the mover ended before printing %q:\n%s", s, m.output())
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timer.C:
			t.Fatalf("the mover did not print %q:\n%s", s, m.output())
		}
	}
}

// wait waits for the mover to end and returns its output.
func (m *asyncMover) wait(t *testing.T) (string, error) {
	t.Helper()
	go func() {
		for range m.lines {
		}
	}()
	select {
	case err := <-m.done:
		return m.output(), err
	case <-time.After(3 * time.Minute):
		t.Fatalf("the mover did not end:\n%s", m.output())
	}
	return "", nil
}

func (m *asyncMover) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.out, "\n")
}

// reportInt reads one figure of the move's report.
func reportInt(t *testing.T, out, re string) int {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the report lacks %s:\n%s", re, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// loadQueues runs the billing and quotes workloads through every proxy until
// the returned stop is called, after each has done some work.
func loadQueues(ctx context.Context, t *testing.T, s *moveStand, ps []*proc) (billing, quotes *workload, stop func()) {
	t.Helper()
	billing, quotes = &workload{}, &workload{}
	ch := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(2)
		go billing.run(ctx, t, s.m, p.listen, "billing", fmt.Sprintf("B%d", i+1), ch, &wg)
		go quotes.run(ctx, t, s.m, p.listen, "quotes", fmt.Sprintf("Q%d", i+1), ch, &wg)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		billing.mu.Lock()
		n := len(billing.acked)
		billing.mu.Unlock()
		if n >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the load did not start: %d enqueues", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return billing, quotes, func() { close(ch); wg.Wait() }
}

// checkLanded checks that every job (filled before the move or enqueued and
// acknowledged through a proxy) is in exactly one set of queue billing on
// the target and has its row there, and that the clients saw no error.
func checkLanded(t *testing.T, s *moveStand, filled []string, ws ...*workload) {
	t.Helper()
	ids := slices.Clone(filled)
	for _, w := range ws {
		for _, err := range w.errs {
			t.Errorf("client error: %v", err)
		}
		if w.tryagains > 0 {
			t.Errorf("%d calls got TRYAGAIN", w.tryagains)
		}
	}
	ids = append(ids, ws[0].acked...)
	ctx := context.Background()
	missing := 0
	for lo := 0; lo < len(ids); lo += 500 {
		part := ids[lo:min(lo+500, len(ids))]
		var cmds valkey.Commands
		for _, id := range part {
			cmds = append(cmds, s.dst.B().Exists().Key(legacy.JobKey("billing", id)).Build())
			for _, set := range []string{"pending", "active", "done", "delayed", "dead"} {
				cmds = append(cmds, s.dst.B().Zscore().Key(legacy.Key("billing", set)).Member(id).Build())
			}
		}
		rs := s.dst.DoMulti(ctx, cmds...)
		for i, id := range part {
			row, _ := rs[6*i].AsInt64()
			in := 0
			for _, r := range rs[6*i+1 : 6*i+6] {
				if _, err := r.AsFloat64(); err == nil {
					in++
				}
			}
			if row != 1 || in != 1 {
				if missing++; missing <= 10 {
					t.Errorf("job %s on the target: row %d, in %d sets", id, row, in)
				}
			}
		}
	}
	t.Logf("%d jobs checked on the target (%d filled, %d enqueued during the move), %d wrong", len(ids), len(filled), len(ws[0].acked), missing)
}

// notifyRestored checks the source's keyspace notifications are off again
// (the stand's nodes start with them off) and the mover's record of them
// gone.
func notifyRestored(t *testing.T, c valkey.Client) {
	t.Helper()
	ctx := context.Background()
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	if err != nil || m["notify-keyspace-events"] != "" {
		t.Errorf("notify-keyspace-events after the move: %q %v", m["notify-keyspace-events"], err)
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key("{emqproxy}:notify").Build()).AsInt64(); n != 0 {
		t.Errorf("{emqproxy}:notify left on the source")
	}
}

// TestQueueMoveWritesDuringPreCopy moves a queue of 20k jobs (its pending
// set copied in chunks) at a slow --rate, so that the copy while served
// takes seconds, while legacy clients enqueue, claim and complete on it
// through two proxies: queue status from another process shows the
// progress; every job and every acknowledged enqueue is on the target
// exactly once after the flip; no call got TRYAGAIN; the source's
// notification setting is restored.
func TestQueueMoveWritesDuringPreCopy(t *testing.T) {
	node.Long(t)
	s := startMoveStand(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	filled := fillQueue(t, s.src, "billing", 20000)
	ps := []*proc{s.proxy(t, "proxy1"), s.proxy(t, "proxy2")}
	waitRegistered(t, s.src, 2)
	waitRegistered(t, s.dst, 2)
	billing, quotes, stop := loadQueues(ctx, t, s, ps)

	mv := s.start(t, "move", "billing", "--to", "module-a", "--rate", "1MiB")
	mv.waitLine(t, "progress: copying, round 1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := s.run(t, "status")
		if err == nil && strings.Contains(out, "MOVE billing: scripts-b -> module-a, step copying") && strings.Contains(out, "progress (") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the copy's progress:\n%s", out)
		}
	}
	out, err := mv.wait(t)
	if err != nil {
		t.Fatalf("move: %v\n%s", err, out)
	}
	t.Logf("mover:\n%s", out)
	// Some work after the flip, on the target.
	billing.mu.Lock()
	n0 := len(billing.acked)
	billing.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); ; {
		billing.mu.Lock()
		n := len(billing.acked)
		billing.mu.Unlock()
		if n >= n0+20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if r := reportInt(t, out, `copied while served: (\d+) rounds`); r < 2 {
		t.Errorf("%d rounds: the changes made during the first were not copied again", r)
	}
	if n := reportInt(t, out, `(\d+) keys in chunks`); n < 1 {
		t.Errorf("the pending set (20k members) was not copied in chunks")
	}
	if n := reportInt(t, out, `; (\d+) changes recorded`); n == 0 {
		t.Errorf("no change was tracked under load")
	}
	if !strings.Contains(out, "tracking: the replication stream") {
		t.Errorf("the mover did not track the source's replication stream")
	}
	if n := reportInt(t, out, `(\d+) elements of large keys patched`); n == 0 {
		t.Errorf("the pending set, written all along, was never patched member by member")
	}
	checkLanded(t, s, filled, billing, quotes)
	notifyRestored(t, s.src)
}

// TestQueueMoveTrackingLost kills the mover's tracking connection on the
// source during its first round (CLIENT KILL TYPE replica for the
// replication stream, TYPE pubsub for keyspace notifications): the mover
// tracks again, reads every key again, and nothing of the load on the
// queue is lost.
func TestQueueMoveTrackingLost(t *testing.T) {
	node.Long(t)
	for _, tc := range []struct{ track, kill string }{{"replication", "replica"}, {"keyspace", "pubsub"}} {
		t.Run(tc.track, func(t *testing.T) {
			s := startMoveStand(t, "")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			filled := fillQueue(t, s.src, "billing", 10000)
			ps := []*proc{s.proxy(t, "proxy1")}
			waitRegistered(t, s.src, 1)
			billing, quotes, stop := loadQueues(ctx, t, s, ps)

			mv := s.start(t, "move", "billing", "--to", "module-a", "--rate", "512KiB", "--track", tc.track)
			mv.waitLine(t, "progress: copying, round 1")
			killed, err := s.src.Do(ctx, s.src.B().Arbitrary("CLIENT", "KILL", "TYPE", tc.kill).Build()).AsInt64()
			if err != nil || killed != 1 {
				t.Fatalf("CLIENT KILL TYPE %s: %d %v", tc.kill, killed, err)
			}
			out, err := mv.wait(t)
			if err != nil {
				t.Fatalf("move: %v\n%s", err, out)
			}
			t.Logf("mover:\n%s", out)
			stop()
			if !strings.Contains(out, "tracking again, every key is read again") {
				t.Errorf("the mover did not say it tracks again")
			}
			if n := reportInt(t, out, `restarted (\d+) times`); n < 1 {
				t.Errorf("tracking restarted %d times", n)
			}
			checkLanded(t, s, filled, billing, quotes)
			notifyRestored(t, s.src)
		})
	}
}

// enqueueLands enqueues one job through the proxy at addr and reports
// whether it landed on want (and not on other).
func enqueueLands(t *testing.T, s *moveStand, addr, id string, want, other valkey.Client) bool {
	t.Helper()
	ctx := context.Background()
	c, err := legacy.Dial(ctx, legacy.Options{Addr: addr, Map: s.m, Brand: s.m.LegacyBrand})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, err := c.Enqueue(ctx, "billing", id, "p"); err != nil || !ok {
		t.Fatalf("enqueue %s: %v %v", id, ok, err)
	}
	return inSets(t, want, "billing", id) == 1 && inSets(t, other, "billing", id) == 0
}

// TestQueueMoveResumeWhileCopying kills the mover after its copy while
// served (before any hold) under load, tracking keyspace notifications;
// queue status shows the move at step copying and who holds the node's
// notifications on; --resume (tracking the replication stream) copies
// again and completes it, every job lands on the target once, and the
// node's notification setting is given back.
func TestQueueMoveResumeWhileCopying(t *testing.T) {
	node.Long(t)
	s := startMoveStand(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	filled := fillQueue(t, s.src, "billing", 5000)
	ps := []*proc{s.proxy(t, "proxy1"), s.proxy(t, "proxy2")}
	waitRegistered(t, s.src, 2)
	billing, quotes, stop := loadQueues(ctx, t, s, ps)
	s.killAfter(t, "copying", "move", "billing", "--to", "module-a", "--track", "keyspace")
	if out, err := s.run(t, "status"); err != nil || !strings.Contains(out, "step copying") ||
		!strings.Contains(out, "keyspace notifications on for the move of billing") {
		t.Errorf("status after the kill: %v", err)
	}
	if !enqueueLands(t, s, ps[0].listen, "DURING-STOP", s.src, s.dst) {
		t.Errorf("billing is not served by its source while the mover is stopped")
	}
	out, err := s.run(t, "move", "billing", "--resume")
	if err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("resume: %v", err)
	}
	stop()
	checkLanded(t, s, append(filled, "DURING-STOP"), billing, quotes)
	notifyRestored(t, s.src)
}
