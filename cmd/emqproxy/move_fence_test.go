package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestQueueMoveStalledMoverAborted is issue 46's first case: a mover of
// billing (with --delete-source) stalls right after a step (--pause-after,
// as a process stopped with SIGSTOP), `queue move billing --abort` gives
// the queue back to its source, clients go on enqueueing there through the
// proxy, and the mover goes on. It must say it was superseded and stop: no
// flip, the source's keys kept, and every acknowledged enqueue on the
// source, which still serves the queue.
func TestQueueMoveStalledMoverAborted(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the proxies' lease): runs beside the other such tests
	for _, step := range []string{"held", "copied"} {
		t.Run(step, func(t *testing.T) { stalledAborted(t, step) })
	}
}

func stalledAborted(t *testing.T, step string) {
	s := startMoveStand(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := s.proxy(t, "proxy")
	waitRegistered(t, s.src, 1)
	waitRegistered(t, s.dst, 1)
	billing := &workload{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go billing.run(ctx, t, s.m, p.listen, "billing", "B", stop, &wg)
	time.Sleep(500 * time.Millisecond)

	// The mover, stalled after step.
	cmd := exec.Command(binary, "queue", "move", "billing", "--to", "module-a", "--delete-source", "--config", s.cfg, "--pause-after", step)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "paused after "+step {
			break
		}
	}
	if len(lines) == 0 || lines[len(lines)-1] != "paused after "+step {
		t.Fatalf("the mover never paused after %s:\n%s", step, strings.Join(lines, "\n"))
	}
	rest := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(stdout)
		rest <- string(b)
	}()

	// The abort, then clients go on with the source.
	out, err := s.run(t, "move", "billing", "--abort")
	if err != nil || !strings.Contains(out, "aborted: billing released on scripts-b") {
		t.Fatalf("abort: %v", err)
	}
	billing.mu.Lock()
	before := len(billing.acked)
	billing.mu.Unlock()
	time.Sleep(700 * time.Millisecond)

	// The mover goes on.
	if _, err := io.WriteString(stdin, "\n"); err != nil {
		t.Fatal(err)
	}
	var moverOut string
	select {
	case r := <-rest:
		moverOut = strings.Join(lines, "\n") + "\n" + r
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the stalled mover did not end within 30 s after it went on:\n%s", strings.Join(lines, "\n"))
	}
	werr := cmd.Wait()
	t.Logf("the stalled mover, after it went on (%v):\n%s", werr, moverOut)
	if werr == nil || !strings.Contains(moverOut, "superseded") {
		t.Errorf("the stalled mover: %v, want it to stop superseded", werr)
	}
	for _, bad := range []string{"flipped billing", "deleted ", "moved billing"} {
		if strings.Contains(moverOut, bad) {
			t.Errorf("the superseded mover went on: %q", bad)
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	for _, err := range billing.errs {
		t.Errorf("client error: %v", err)
	}
	t.Logf("billing: %d ops, %d acknowledged enqueues (%d after the abort), %d TRYAGAIN", billing.ops, len(billing.acked), len(billing.acked)-before, billing.tryagains)
	if len(billing.acked)-before < 5 {
		t.Errorf("too little work after the abort: %d enqueues", len(billing.acked)-before)
	}
	// Every acknowledged enqueue is on the source, which serves the queue.
	for _, id := range billing.acked {
		if n := inSets(t, s.src, "billing", id); n != 1 {
			t.Errorf("job %s is in %d sets of the source", id, n)
		}
	}
	if n := len(dumpQueue(t, s.dst, "billing")); n != 0 {
		t.Errorf("%d keys of billing on the target after the abort", n)
	}
	if out, err := s.run(t, "status"); err != nil || !strings.Contains(out, "billing: owned scripts-b") || strings.Contains(out, "MOVE billing") {
		t.Errorf("status after the abort: %v\n%s", err, out)
	}
	c, err := legacy.Dial(ctx, legacy.Options{Addr: p.listen, Map: s.m, Brand: s.m.LegacyBrand})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := fmt.Sprintf("LAST-%s", step)
	if ok, err := c.Enqueue(ctx, "billing", id, "p"); err != nil || !ok || inSets(t, s.src, "billing", id) != 1 {
		t.Errorf("enqueue at the end did not reach scripts-b: %v %v", ok, err)
	}
}
