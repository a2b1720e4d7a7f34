package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestQueueMoveToAMasterSetConfirmsTheCopyOnItsReplica is the loss of the
// fault campaign's seed 3131 (20 minutes, queue charlie1): a move to a
// module master set whose replica was not taking the primary's writes (a
// stale primary not yet turned into a replica after a failover) copied
// 6,428 keys to the primary, flipped the queue there and deleted the
// source's keys; the next failover promoted the replica, without the
// copy: every job of the queue was gone. The proxies confirm a client's
// write on the node's replicas (ack_replicas) before they answer it; the
// mover confirmed nothing.
//
// The target here is a module primary whose only replica is frozen
// (SIGSTOP), with ack_replicas 1: the move must stop before it records
// the copy as done, give the queue back to its source and keep the
// source's keys; once the replica is back, --resume completes it.
func TestQueueMoveToAMasterSetConfirmsTheCopyOnItsReplica(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (a frozen replica, WAIT timeouts): runs beside the other such tests
	s, replica := startConfirmStand(t)
	ctx := context.Background()
	ids := fillQueue(t, s.src, "billing", 50)
	before := dumpQueue(t, s.src, "billing")

	if err := replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	// --deadline 0: the first attempt's outcome (moveUntil resumes it
	// otherwise: TestQueueMoveResumesByItself).
	out, err := s.run(t, "move", "billing", "--to", "module-a", "--delete-source", "--deadline", "0")
	if err == nil || !strings.Contains(out, "not confirmed by the replicas") {
		t.Errorf("a move to a primary whose replica does not take its writes: %v, want the copy not confirmed", err)
	}
	if got := dumpQueue(t, s.src, "billing"); !mapsEqual(got, before) {
		t.Errorf("the source holds %d keys of billing after the refused move, want its %d keys unchanged", len(got), len(before))
	}
	st, _ := s.run(t, "status")
	if strings.Contains(st, "billing: owned module-a") {
		t.Errorf("billing was given to module-a, whose replica has none of it:\n%s", st)
	}

	// The replica back, the move completes.
	if err := replica.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := replica.WaitSynced(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Its link said up while frozen: wait until it takes writes again.
	for deadline := time.Now().Add(20 * time.Second); ; {
		rs := s.dst.DoMulti(ctx, s.dst.B().Set().Key("caught-up").Value("1").Build(), s.dst.B().Wait().Numreplicas(1).Timeout(200).Build())
		if n, _ := rs[1].AsInt64(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the thawed replica does not take the primary's writes")
		}
	}
	out, err = s.run(t, "move", "billing", "--resume", "--delete-source")
	if err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("resume once the replica is back: %v", err)
	}
	rc := replica.Client(t)
	for _, id := range ids {
		if n := inSets(t, rc, "billing", id); n != 1 {
			t.Errorf("after the move, job %s is in %d sets of module-a's replica", id, n)
		}
	}
	if n, _ := rc.Do(ctx, rc.B().Hget().Key(table.KeyQueues).Field("billing").Build()).ToString(); !strings.HasSuffix(n, "owned module-a") {
		t.Errorf("module-a's replica has billing's entry %q, want it owned by module-a", n)
	}
}

// startConfirmStand is a move stand whose target, module-a, is a module
// primary with one replica and ack_replicas 1 (ack_timeout 300ms); billing
// is on scripts-b.
func startConfirmStand(t *testing.T) (*moveStand, *node.Node) {
	t.Helper()
	dir := t.TempDir()
	mapPath := filepath.Join(dir, "map.yaml")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), mapPath)
	m, err := shamap.Load(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	scripts := node.StartT(t, node.Options{Role: node.Scripts, Brand: m.LegacyBrand})
	primary := node.StartT(t, node.Options{Role: node.Module})
	replica := node.StartT(t, node.Options{Role: node.Module, ReplicaOf: primary.Addr})
	if err := replica.WaitSynced(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Thaw() })
	cfg := filepath.Join(dir, "emqproxy.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`map: %q
upstreams:
  module-a:
    address: %q
    role: module
    ack_replicas: 1
    ack_timeout: 300ms
  scripts-b:
    address: %q
    role: scripts
routes:
  - queues: ["billing"]
    upstream: scripts-b
  - queues: ["*"]
    upstream: module-a
control:
  enabled: true
  poll: 100ms
  lease: 1s
timeouts:
  drain: 2s
  hold: 5s
`, mapPath, primary.Addr, scripts.Addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &moveStand{dir: dir, cfg: cfg, m: m, scripts: scripts, module: primary, src: scripts.Client(t), dst: primary.Client(t)}
	return s, replica
}

// TestQueueMoveResumesByItself: a move that meets a fault it can wait out
// (its target's replica frozen, so the copy is not confirmed) says what
// stopped it, waits and resumes by itself; once the replica is back the
// move ends moved, with every job on the target's replica, and no person
// ran --resume.
func TestQueueMoveResumesByItself(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the retry's back-off): runs beside the other such tests
	s, replica := startConfirmStand(t)
	ids := fillQueue(t, s.src, "billing", 50)
	if err := replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	// --replica-wait 0: the attempt stops at the refusal instead of
	// waiting for the replica before its hold
	// (TestQueueMoveWaitsForTheTargetsReplica).
	mv := s.start(t, "move", "billing", "--to", "module-a", "--delete-source", "--deadline", "2m", "--replica-wait", "0")
	mv.waitLine(t, "then trying again")
	if err := replica.Thaw(); err != nil {
		t.Fatal(err)
	}
	out, err := mv.wait(t)
	if err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("the move did not end moved by itself: %v\n%s", err, out)
	}
	t.Logf("mover:\n%s", out)
	if !strings.Contains(out, "not confirmed by the replicas") || !strings.Contains(out, "attempt 1 stopped") {
		t.Errorf("the mover did not say what it waited for:\n%s", out)
	}
	rc := replica.Client(t)
	for _, id := range ids {
		if n := inSets(t, rc, "billing", id); n != 1 {
			t.Errorf("after the move, job %s is in %d sets of module-a's replica", id, n)
		}
	}
}

// TestQueueMoveWaitsForTheTargetsReplica: a move whose target's replica
// is frozen when its copy is done waits for it before the hold, while the
// queue is served by its source and the copy is kept, says what it waits
// for, and once the replica is back holds and moves the queue in that
// same attempt, every job on the target's replica.
func TestQueueMoveWaitsForTheTargetsReplica(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (a frozen replica, WAIT timeouts): runs beside the other such tests
	s, replica := startConfirmStand(t)
	ids := fillQueue(t, s.src, "billing", 50)
	if err := replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	mv := s.start(t, "move", "billing", "--to", "module-a", "--delete-source", "--deadline", "2m")
	mv.waitLine(t, "for the replicas before holding billing")
	mv.waitLine(t, "progress: waiting for the replicas of module-a")
	st, _ := s.run(t, "status")
	if !strings.Contains(st, "MOVE billing: scripts-b -> module-a, step copying") || !strings.Contains(st, "waiting for the replicas of module-a") {
		t.Errorf("while the mover waits for the replica, billing must be served by scripts-b, not held, and status must say what the mover waits for:\n%s", st)
	}
	if err := replica.Thaw(); err != nil {
		t.Fatal(err)
	}
	out, err := mv.wait(t)
	if err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("the move did not end moved: %v\n%s", err, out)
	}
	t.Logf("mover:\n%s", out)
	if strings.Contains(out, "attempt 1 stopped") || !strings.Contains(out, "WAIT 1 300 answered 0") {
		t.Errorf("the mover stopped instead of waiting, or did not say what it waited for:\n%s", out)
	}
	rc := replica.Client(t)
	for _, id := range ids {
		if n := inSets(t, rc, "billing", id); n != 1 {
			t.Errorf("after the move, job %s is in %d sets of module-a's replica", id, n)
		}
	}
}

// TestQueueMoveWaitsForAnUpstreamDownAtTheStart: a move begun while its
// target does not answer (frozen: a node restarting or failing over)
// writes nothing, says what it waits for, dials the target again after
// each wait, and once the target is back moves the queue, within
// --deadline and without a person running it again.
func TestQueueMoveWaitsForAnUpstreamDownAtTheStart(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (the retry's back-off): runs beside the other such tests
	s, _ := startConfirmStand(t)
	ids := fillQueue(t, s.src, "billing", 20)
	if err := s.module.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.module.Thaw() })
	mv := s.start(t, "move", "billing", "--to", "module-a", "--delete-source", "--deadline", "2m")
	mv.waitLine(t, "then trying again")
	if err := s.module.Thaw(); err != nil {
		t.Fatal(err)
	}
	out, err := mv.wait(t)
	if err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("the move did not end moved by itself: %v\n%s", err, out)
	}
	t.Logf("mover:\n%s", out)
	if !strings.Contains(out, "attempt 1 stopped") || !strings.Contains(out, "module-a is unreachable") {
		t.Errorf("the mover did not say what it waited for:\n%s", out)
	}
	for _, id := range ids {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("after the move, job %s is in %d sets of module-a", id, n)
		}
	}
}

// TestBackOffEndsWhenEveryUpstreamAnswers: after an unreachable upstream
// the back-off ends once every upstream answers, not a whole back-off
// later; after any other stop it waits its whole length.
func TestBackOffEndsWhenEveryUpstreamAnswers(t *testing.T) {
	ctx := context.Background()
	asks := 0
	t0 := time.Now()
	if !backOff(ctx, 10*time.Second, true, func() bool { asks++; return asks >= 3 }) {
		t.Fatal("the back-off ended as if cancelled")
	}
	if d := time.Since(t0); d < 3*answerPoll || d > 5*time.Second || asks != 3 {
		t.Errorf("an early back-off took %v and asked %d times; want about %v and 3", d, asks, 3*answerPoll)
	}
	asks, t0 = 0, time.Now()
	backOff(ctx, 600*time.Millisecond, false, func() bool { asks++; return true })
	if d := time.Since(t0); d < 600*time.Millisecond || asks != 0 {
		t.Errorf("a back-off after another stop took %v and asked %d times; want its whole 600ms, asking nothing", d, asks)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if backOff(cctx, time.Second, true, func() bool { return false }) {
		t.Error("a back-off whose context ended reported a full wait")
	}
}

// TestQueueMoveWaitsForAThirdUpstream: a move whose copy is done while an
// upstream that is neither its source nor its target does not answer
// (frozen: a node restarting, failing over or stopped) waits for it
// before the hold, the queue served by its source and the copy kept, says
// what it waits for, and once that upstream answers holds and moves the
// queue in that same attempt. (The hold's epoch must be above every
// upstream's table: before, the attempt stopped there and deleted its
// copy.)
func TestQueueMoveWaitsForAThirdUpstream(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (frozen nodes, WAIT timeouts): runs beside the other such tests
	s, replica := startConfirmStand(t)
	third := node.StartT(t, node.Options{Role: node.Module})
	t.Cleanup(func() { _ = third.Thaw() })
	cfg, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	withThird := strings.Replace(string(cfg), "  scripts-b:\n", fmt.Sprintf("  module-c:\n    address: %q\n    role: module\n  scripts-b:\n", third.Addr), 1)
	withThird = strings.Replace(withThird, "timeouts:\n", "timeouts:\n  upstream: 2s\n", 1)
	if err := os.WriteFile(s.cfg, []byte(withThird), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := fillQueue(t, s.src, "billing", 50)
	// The target's replica frozen first holds the mover before its hold
	// (TestQueueMoveWaitsForTheTargetsReplica), every upstream dialled.
	if err := replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	mv := s.start(t, "move", "billing", "--to", "module-a", "--delete-source", "--deadline", "2m")
	mv.waitLine(t, "for the replicas before holding billing")
	if err := third.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Thaw(); err != nil {
		t.Fatal(err)
	}
	mv.waitLine(t, "for every upstream to answer before holding billing")
	mv.waitLine(t, "progress: waiting for every upstream to answer")
	if got, err := s.src.Do(context.Background(), s.src.B().Hget().Key(table.MoveKey("billing")).Field("step").Build()).ToString(); err != nil || got != "copying" {
		t.Errorf("while the mover waits for module-c, billing's move must be at step copying (served by scripts-b): %q, %v", got, err)
	}
	if err := third.Thaw(); err != nil {
		t.Fatal(err)
	}
	out, err := mv.wait(t)
	if err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("the move did not end moved: %v\n%s", err, out)
	}
	t.Logf("mover:\n%s", out)
	if strings.Contains(out, "attempt 1 stopped") || strings.Contains(out, "were deleted") || !strings.Contains(out, "every upstream answered") {
		t.Errorf("the mover stopped or threw its copy away instead of waiting for module-c:\n%s", out)
	}
	for _, id := range ids {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("after the move, job %s is in %d sets of module-a", id, n)
		}
	}
}

// TestQueueMoveAbortWaitsForAnUpstream: --abort run while an upstream
// does not answer (frozen: a node restarting or failing over) says what
// stopped it, waits, and once the upstream is back aborts the move by
// itself: the record is gone and the source serves the queue, without a
// person running --abort again.
func TestQueueMoveAbortWaitsForAnUpstream(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (frozen nodes, the retry's back-off): runs beside the other such tests
	s, replica := startConfirmStand(t)
	fillQueue(t, s.src, "billing", 20)
	before := dumpQueue(t, s.src, "billing")
	// A move the target's frozen replica stops, left in progress.
	if err := replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	if out, err := s.run(t, "move", "billing", "--to", "module-a", "--deadline", "0"); err == nil || !strings.Contains(out, "not confirmed by the replicas") {
		t.Fatalf("a move to a primary whose replica is frozen: %v, want it stopped, its record left\n%s", err, out)
	}
	if err := replica.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := s.module.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.module.Thaw() })
	ab := s.start(t, "move", "billing", "--abort", "--deadline", "2m")
	ab.waitLine(t, "abort attempt 1 stopped")
	if err := s.module.Thaw(); err != nil {
		t.Fatal(err)
	}
	out, err := ab.wait(t)
	if err != nil || !strings.Contains(out, "aborted: the copy of billing stopped") {
		t.Fatalf("the abort did not end aborted by itself: %v\n%s", err, out)
	}
	t.Logf("abort:\n%s", out)
	if !strings.Contains(out, "module-a") || !strings.Contains(out, "then trying again") {
		t.Errorf("the abort did not say what it waited for:\n%s", out)
	}
	ctx := context.Background()
	if n, err := s.src.Do(ctx, s.src.B().Exists().Key(table.MoveKey("billing")).Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("billing's move record is still on scripts-b after the abort (%d, %v)", n, err)
	}
	if got := dumpQueue(t, s.src, "billing"); !mapsEqual(got, before) {
		t.Errorf("the source holds %d keys of billing after the abort, want its %d keys unchanged", len(got), len(before))
	}
	if got := dumpQueue(t, s.dst, "billing"); len(got) != 0 {
		t.Errorf("module-a holds %d keys of billing after the abort, want none", len(got))
	}
}
