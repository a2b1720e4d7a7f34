package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The loss of the fault campaign's seed 3131 after the copy and the flip
// were confirmed (bench/results/2026-12-02-1403-83d215b-chaos.md, queue
// charlie1: 138 acknowledged enqueues lost, 82 jobs completed twice). A
// flip writes the new owner on the target, then on the source; here the
// source's write was lost (a failover of the source during the flip), so
// the source still holds the queue at the hold's epoch, with the move's
// record at step copied, while the target serves the queue at the flip's
// epoch. The resume that followed found the flip on the target and
// removed the record as stale, but left the source's hold: an entry that
// only the target's higher one outranks. Seventeen seconds later, with
// the target failing over, a mover that could not read the target's
// table saw the queue "held on module-a with no move record", its
// --abort released it to the source at an epoch above the flip's, and
// the queue went back to the source's copy of before the flip: every job
// written on the target since was gone, every job completed there since
// was pending again.

// writeJob writes a pending job of q on c (as an enqueue leaves it).
func writeJob(t *testing.T, c valkey.Client, q, id string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Do(ctx, c.B().Hset().Key(legacy.JobKey(q, id)).FieldValue().
		FieldValue("state", "pending").FieldValue("attempts", "0").FieldValue("payload", "written on the owner").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Zadd().Key(legacy.Key(q, "pending")).ScoreMember().ScoreMember(0, id).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// entryOn is q's entry in c's own control table ("" when none).
func entryOn(t *testing.T, c valkey.Client, q string) string {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Hget().Key(table.KeyQueues).Field(q).Build()).ToString()
	if err != nil && !valkey.IsValkeyNil(err) {
		t.Fatal(err)
	}
	return s
}

// TestQueueMoveResumeOfAFlipDoneOnTheTargetOnlyCompletesItOnTheSource: a
// move scripts-b -> module-a stopped after its copy, then its flip reached
// the target (module-a owns billing at the flip's epoch) but not the
// source, which still holds billing at the hold's epoch. The resume finds
// the move over (the target owns the queue) and removes the record; it
// must also write the queue's owner on the source, so that the source's
// own table no longer says the queue is held there: otherwise whoever
// reads the tables without the target's (a proxy or a mover while the
// target fails over) sees the old hold and acts on it
// (TestQueueMoveIsRefusedWhileAnUpstreamIsUnreachable shows where that
// led).
func TestQueueMoveResumeOfAFlipDoneOnTheTargetOnlyCompletesItOnTheSource(t *testing.T) {
	s := startMoveStand(t, "")
	ctx := context.Background()
	ids := fillQueue(t, s.src, "billing", 20)
	s.killAfter(t, "copied", "move", "billing", "--to", "module-a")
	hold, err := table.ParseEntry(entryOn(t, s.src, "billing"))
	if err != nil || hold.State != table.Held {
		t.Fatalf("after the copy scripts-b has billing's entry %+v (%v), want it held", hold, err)
	}

	// The flip's first write, on the target; its second, on the source,
	// lost.
	flip := table.Entry{Epoch: hold.Epoch + 1, State: table.Owned, Owner: "module-a"}
	for _, r := range s.dst.DoMulti(ctx, s.dst.B().Multi().Build(),
		s.dst.B().Hset().Key(table.KeyQueues).FieldValue().FieldValue("billing", flip.String()).Build(),
		s.dst.B().Set().Key(table.KeyEpoch).Value(strconv.FormatInt(flip.Epoch, 10)).Build(),
		s.dst.B().Exec().Build()) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
	writeJob(t, s.dst, "billing", "AFTER")

	out, err := s.run(t, "move", "billing", "--resume", "--delete-source")
	if err == nil || !strings.Contains(out, "is over") {
		t.Errorf("the resume of a move whose flip is on the target: %v, want it found over", err)
	}
	if got := entryOn(t, s.src, "billing"); got != flip.String() {
		t.Errorf("after the resume scripts-b's own entry of billing is %q, want the flip's %q (the move's hold must not stay there)", got, flip.String())
	}
	st, serr := s.run(t, "status")
	if serr != nil || !strings.Contains(st, "billing: owned module-a") || strings.Contains(st, "MOVE billing") {
		t.Errorf("after the resume billing must be owned by module-a, with no move record:\n%s", st)
	}
	for _, id := range append([]string{"AFTER"}, ids[:3]...) {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("job %s is in %d sets of module-a, billing's owner", id, n)
		}
	}
}

// TestQueueMoveIsRefusedWhileAnUpstreamIsUnreachable: the control table
// is spread over the nodes (a flip is written on its two nodes, a hold or
// a release on the source only), so the entry that decides a queue's
// owner may be on a node the mover cannot reach. billing was moved
// scripts-b -> module-a; scripts-b still holds it at an older epoch (the
// move's hold, as a resume that found the flip on module-a alone left it
// before it wrote the owner on the source too; any entry that module-a's
// outranks). With module-a frozen (a failover in progress), a
// mover that reads only the tables it reaches saw billing "held on
// scripts-b with no move record", and --abort released it to scripts-b at
// an epoch above module-a's entry: once module-a was back, billing was
// served by scripts-b's copy of before the move, without the job written
// on module-a since. Every change of the table (move, resume, abort) now
// needs every upstream's table.
func TestQueueMoveIsRefusedWhileAnUpstreamIsUnreachable(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (dial timeouts): runs beside the other such tests
	third := node.StartT(t, node.Options{Role: node.Module})
	s := startMoveStand(t, fmt.Sprintf("  module-c:\n    address: %q\n    role: module\n", third.Addr))
	ctx := context.Background()
	fillQueue(t, s.src, "billing", 20)
	if out, err := s.run(t, "move", "billing", "--to", "module-a", "--delete-source"); err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("the move: %v", err)
	}
	writeJob(t, s.dst, "billing", "AFTER")
	flip, err := table.ParseEntry(entryOn(t, s.dst, "billing"))
	if err != nil {
		t.Fatal(err)
	}
	// scripts-b's own entry: the move's hold, below the flip.
	old := table.Entry{Epoch: flip.Epoch - 1, State: table.Held, Owner: "scripts-b"}
	if err := s.src.Do(ctx, s.src.B().Hset().Key(table.KeyQueues).FieldValue().FieldValue("billing", old.String()).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// Another queue's move raises the epochs of scripts-b and module-c
	// past the flip's (moves go on beside a failover).
	if out, err := s.run(t, "move", "ledger", "--to", "module-c"); err != nil || !strings.Contains(out, "moved ledger from scripts-b to module-c") {
		t.Fatalf("the move of ledger: %v", err)
	}

	if err := s.module.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := s.module.Thaw(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw)
	for _, args := range [][]string{
		{"move", "billing", "--to", "module-c", "--replace", "--deadline", "0"},
		{"move", "billing", "--resume", "--deadline", "0"},
		{"move", "billing", "--abort", "--deadline", "0"},
	} {
		out, err := s.run(t, args...)
		if err == nil || !strings.Contains(out, "module-a is unreachable") {
			t.Errorf("%s with module-a unreachable: %v, want a refusal naming module-a", strings.Join(args, " "), err)
		}
	}
	thaw()

	st, serr := s.run(t, "status")
	if serr != nil || !strings.Contains(st, "billing: owned module-a") {
		t.Errorf("billing must stay owned by module-a, where its live copy is:\n%s", st)
	}
	if n := inSets(t, s.dst, "billing", "AFTER"); n != 1 {
		t.Errorf("the job written on module-a is in %d of its sets", n)
	}
}

// TestQueueMoveKilledAfterItsFlipIsCompletedByResume is what the fault
// campaign found (bench/results/2026-12-06-2245-9eb45d0-chaos.md, queue
// delta1): a move with --delete-source flipped, then its deletion of the
// source's keys failed (the source reset the connection). Its retry read
// its own record as stale (the queue owned by the target) and removed the
// record only: the source's 128,214 keys stayed, named by nothing, though
// the move had asked for their deletion. The record now carries the
// flip's epoch and the --delete-source of the move: a resume that finds
// the queue owned by the target at that epoch completes the move (the
// source's keys deleted, the record removed), and an abort is refused.
// Here the mover is killed right after its flip; the resume is run
// without --delete-source.
func TestQueueMoveKilledAfterItsFlipIsCompletedByResume(t *testing.T) {
	s := startMoveStand(t, "")
	ids := fillQueue(t, s.src, "billing", 20)
	s.killAfter(t, "flipped", "move", "billing", "--to", "module-a", "--delete-source")
	if st, _ := s.run(t, "status"); !strings.Contains(st, "MOVE billing") || !strings.Contains(st, "billing: owned module-a") {
		t.Fatalf("after the flip billing must be owned by module-a, its move record still listed:\n%s", st)
	}

	if out, err := s.run(t, "move", "billing", "--abort"); err == nil || !strings.Contains(out, "began its flip") {
		t.Errorf("the abort of a flipped move: %v, want it refused", err)
	}
	out, err := s.run(t, "move", "billing", "--resume")
	if err != nil || !strings.Contains(out, "was flipped at epoch") || !strings.Contains(out, "source keys deleted") {
		t.Errorf("the resume of a flipped move: %v, want it completed, the source's keys deleted", err)
	}
	if n := queueKeys(t, s.src, "billing"); n > 0 {
		t.Errorf("scripts-b still holds %d keys of billing", n)
	}
	if st, serr := s.run(t, "status"); serr != nil || strings.Contains(st, "MOVE billing") || !strings.Contains(st, "billing: owned module-a") {
		t.Errorf("after the resume billing must be owned by module-a, with no move record:\n%s", st)
	}
	for _, id := range ids[:3] {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("job %s is in %d sets of module-a, billing's owner", id, n)
		}
	}
	if out, err := s.run(t, "leftovers"); err != nil || !strings.Contains(out, "leftovers: 0 keys") {
		t.Errorf("queue leftovers after the resume: %v", err)
	}
}
