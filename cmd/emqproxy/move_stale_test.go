package main

import (
	"context"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/control"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/stand/legacy"
)

// TestQueueMoveAbortOfAStaleRecordKeepsTheLiveQueue is the loss the fault
// campaign found (bench/results/2026-12-02-0802-1291031-chaos.md, queue
// delta1): a move completes, but its last writes on a master set (the
// deletion of the move's record, of the source's keys) went to a primary
// that a failover then discarded, so the promoted node still holds the
// record of the move at step copied. The queue is served by the target
// meanwhile. The next `queue move` finds the stale record; `--abort` then
// deletes every key of the queue on the target, where the live data is,
// and releases the queue to the source at a new epoch, which serves its
// old copy: every job written since the flip is gone, every job completed
// since is pending again.
//
// The failover is simulated by restoring the record on the source as it
// was at step copied (the mover leaves the node unchanged otherwise), then
// at step held for a resume. An abort or a resume of copying or held that
// finds the queue owned by the record's target at an epoch past the
// record's treats the move as done (removes the record): it never releases
// the queue to the source nor deletes the target's keys (control/stale.go).
func TestQueueMoveAbortOfAStaleRecordKeepsTheLiveQueue(t *testing.T) {
	s := startMoveStand(t, "")
	ctx := context.Background()
	ids := fillQueue(t, s.src, "billing", 20)

	// The move, stopped after the copy: the record at step copied.
	rec, started := s.copiedThenResumed(t)

	// The target serves billing: a job written and one completed there.
	if err := s.dst.Do(ctx, s.dst.B().Hset().Key(legacy.JobKey("billing", "AFTER")).FieldValue().
		FieldValue("state", "pending").FieldValue("attempts", "0").FieldValue("payload", "written after the move").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := s.dst.Do(ctx, s.dst.B().Zadd().Key(legacy.Key("billing", "pending")).ScoreMember().ScoreMember(0, "AFTER").Build()).Error(); err != nil {
		t.Fatal(err)
	}

	// A failover on the source brings back the record the move had deleted.
	restore := func(step string) {
		t.Helper()
		if err := s.src.Do(ctx, s.src.B().Restore().Key(table.MoveKey("billing")).Ttl(0).SerializedValue(rec).Replace().Build()).Error(); err != nil {
			t.Fatalf("RESTORE the record: %v", err)
		}
		if err := s.src.Do(ctx, s.src.B().Hset().Key(table.MoveKey("billing")).FieldValue().FieldValue("step", step).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := s.src.Do(ctx, s.src.B().Hset().Key(table.KeyMoves).FieldValue().FieldValue("billing", started).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	restore("copied")
	out, err := s.run(t, "move", "billing", "--abort")
	if err == nil || !strings.Contains(out, "is over") {
		t.Errorf("the abort of a stale record: %v", err)
	}
	check(t, s, ids, out)

	restore("held")
	out, err = s.run(t, "move", "billing", "--resume")
	if err == nil || !strings.Contains(out, "is over") {
		t.Errorf("the resume of a stale record at step held: %v", err)
	}
	check(t, s, ids, out)
	if st, _ := s.run(t, "status"); strings.Contains(st, "MOVE billing") {
		t.Errorf("the stale record is still listed:\n%s", st)
	}
}

// check: billing is whole on module-a and owned by it.
func check(t *testing.T, s *moveStand, ids []string, out string) {
	t.Helper()
	if n := inSets(t, s.dst, "billing", "AFTER"); n != 1 {
		t.Errorf("the job written on the target after the move is in %d sets of the target (the live queue was deleted)", n)
	}
	for _, id := range ids[:3] {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("job %s, moved, is in %d sets of the target", id, n)
		}
	}
	st, serr := s.run(t, "status")
	if serr != nil || !strings.Contains(st, "billing: owned module-a") {
		t.Errorf("after the abort of a stale record billing must stay owned by module-a:\n%s\n%s", out, st)
	}
}

// TestQueueMoveResumeOfAStaleCopiedRecordKeepsTheLiveQueue: a record at
// step copied (or flipping) that outlived its move is resumed after the
// queue moved on. The record of a move scripts-b -> module-a reappears on
// scripts-b (the promoted node of a failover that discarded its deletion,
// which the next mover, not reaching that node, did not see), after the
// queue was moved back to scripts-b, module-a's copy deleted. A resume
// from step copied only flips, so it was taken as always safe: it flipped
// billing to module-a at a new epoch, above the live entry, where no key
// of billing is left: every job, the ones written since included, was
// gone from the queue (and the live keys, on scripts-b, deleted with
// --delete-source). The merged table says the move is over (billing
// owned by scripts-b at an epoch past the record's): the record is only
// removed.
func TestQueueMoveResumeOfAStaleCopiedRecordKeepsTheLiveQueue(t *testing.T) {
	s := startMoveStand(t, "")
	ctx := context.Background()
	ids := fillQueue(t, s.src, "billing", 20)

	// The move scripts-b -> module-a, stopped after the copy, then resumed.
	rec, started := s.copiedThenResumed(t)
	// And back to scripts-b, module-a's keys deleted.
	if out, err := s.run(t, "move", "billing", "--to", "scripts-b", "--replace", "--delete-source"); err != nil || !strings.Contains(out, "moved billing from module-a to scripts-b") {
		t.Fatalf("the move back: %v", err)
	}
	// scripts-b serves billing: a job written there.
	if err := s.src.Do(ctx, s.src.B().Hset().Key(legacy.JobKey("billing", "AFTER")).FieldValue().
		FieldValue("state", "pending").FieldValue("attempts", "0").FieldValue("payload", "written after the moves").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := s.src.Do(ctx, s.src.B().Zadd().Key(legacy.Key("billing", "pending")).ScoreMember().ScoreMember(0, "AFTER").Build()).Error(); err != nil {
		t.Fatal(err)
	}

	for _, step := range []string{control.StepCopied, control.StepFlipping} {
		// The first move's record comes back, at step copied or flipping.
		if err := s.src.Do(ctx, s.src.B().Restore().Key(table.MoveKey("billing")).Ttl(0).SerializedValue(rec).Replace().Build()).Error(); err != nil {
			t.Fatalf("RESTORE the record: %v", err)
		}
		if err := s.src.Do(ctx, s.src.B().Hset().Key(table.MoveKey("billing")).FieldValue().FieldValue("step", step).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := s.src.Do(ctx, s.src.B().Hset().Key(table.KeyMoves).FieldValue().FieldValue("billing", started).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		out, err := s.run(t, "move", "billing", "--resume", "--delete-source")
		if err == nil || !strings.Contains(out, "is over") {
			t.Errorf("the resume of a stale record at step %s: %v", step, err)
		}
		st, serr := s.run(t, "status")
		if serr != nil || !strings.Contains(st, "billing: owned scripts-b") {
			t.Errorf("after the resume of a stale record at step %s billing must stay owned by scripts-b:\n%s\n%s", step, out, st)
		}
		if strings.Contains(st, "MOVE billing") {
			t.Errorf("the stale record (step %s) is still listed:\n%s", step, st)
		}
		for _, id := range append([]string{"AFTER"}, ids[:3]...) {
			if n := inSets(t, s.src, "billing", id); n != 1 {
				t.Errorf("after the resume of a stale record at step %s, job %s is in %d sets of scripts-b, its owner", step, id, n)
			}
		}
		if t.Failed() {
			return
		}
	}
}

// copiedThenResumed moves billing from scripts-b to module-a, stops the
// mover after the copy, keeps the move's record (DUMP) and the control
// table's start entry as they were then, and resumes the move to its end.
func (s *moveStand) copiedThenResumed(t *testing.T) (rec, started string) {
	t.Helper()
	ctx := context.Background()
	s.killAfter(t, "copied", "move", "billing", "--to", "module-a")
	rec, err := s.src.Do(ctx, s.src.B().Dump().Key(table.MoveKey("billing")).Build()).ToString()
	if err != nil {
		t.Fatalf("DUMP the record: %v", err)
	}
	started, err = s.src.Do(ctx, s.src.B().Hget().Key(table.KeyMoves).Field("billing").Build()).ToString()
	if err != nil {
		t.Fatalf("HGET %s billing: %v", table.KeyMoves, err)
	}
	if out, err := s.run(t, "move", "billing", "--resume"); err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
		t.Fatalf("resume: %v", err)
	}
	return rec, started
}
