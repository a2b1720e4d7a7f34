package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The mover confirmed its copy and its flip on the replicas of a master
// set (ack_replicas), but not its hold, its release or its abort: each was
// written on the source's primary and relied on at once. A hold lost in a
// failover of the source takes its record with it; between the copy's
// record and the flip nothing looked again, and the proxies, reading the
// promoted node's table, served the queue on the source while the mover
// flipped it to the target (the writes of that window are lost). A lost
// release or abort leaves the queue held on the promoted node.
//
// Here the source, scripts-b, is a primary with ack_replicas 1 whose only
// replica is frozen (SIGSTOP): none of the mover's writes on it can be
// confirmed. Each step must stop before anything relies on the unconfirmed
// write, and say so.

// startSourceSetStand is startMoveStand with scripts-b a primary with one
// replica, confirmed with ack_replicas 1 (ack_timeout 2s: a replica on a machine
// whose two cores three test suites share has taken more than 300ms to
// acknowledge; a frozen one never does, whatever the timeout).
func startSourceSetStand(t *testing.T) (*moveStand, *node.Node) {
	t.Helper()
	s := newMoveStand(t)
	s.scripts = node.StartT(t, node.Options{Role: node.Scripts, Brand: s.m.LegacyBrand})
	replica := node.StartT(t, node.Options{Role: node.Scripts, ReplicaOf: s.scripts.Addr})
	s.module = node.StartT(t, node.Options{Role: node.Module})
	if err := replica.WaitSynced(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Thaw() })
	s.configure(t, "    ack_replicas: 1\n    ack_timeout: 2s\n")
	return s, replica
}

// waitTakesWrites waits until a replica of the primary c takes its writes
// again (a thawed replica's link said up while it was frozen).
func waitTakesWrites(t *testing.T, c valkey.Client) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(20 * time.Second); ; {
		rs := c.DoMulti(ctx, c.B().Set().Key("caught-up").Value("1").Build(), c.B().Wait().Numreplicas(1).Timeout(200).Build())
		if n, _ := rs[1].AsInt64(); n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the thawed replica does not take the primary's writes")
		}
	}
}

// notFlipped checks that billing was neither flipped to module-a nor left
// held on scripts-b's primary: scripts-b owns it, module-a has no entry.
func notFlipped(t *testing.T, s *moveStand) {
	t.Helper()
	if got := entryOn(t, s.dst, "billing"); got != "" {
		t.Errorf("module-a has billing's entry %q: the move went on past a write its source's replicas never confirmed", got)
	}
	if e, err := table.ParseEntry(entryOn(t, s.src, "billing")); err != nil || e.State != table.Owned || e.Owner != "scripts-b" {
		t.Errorf("scripts-b's primary has billing's entry %+v (%v), want it owned by scripts-b (given back)", e, err)
	}
}

// TestQueueMoveConfirmsItsHoldReleaseAndAbortOnTheSourcesReplicas: the
// hold, the release of a resume at step held and an abort, each with the
// source's replica frozen.
func TestQueueMoveConfirmsItsHoldReleaseAndAbortOnTheSourcesReplicas(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (a frozen replica, WAIT timeouts): runs beside the other such tests
	t.Run("hold", func(t *testing.T) {
		s, replica := startSourceSetStand(t)
		ids := fillQueue(t, s.src, "billing", 20)
		before := dumpQueue(t, s.src, "billing")
		if err := replica.Freeze(); err != nil {
			t.Fatal(err)
		}
		out, err := s.run(t, "move", "billing", "--to", "module-a", "--delete-source", "--deadline", "0")
		if err == nil || !strings.Contains(out, "the hold of billing") || !strings.Contains(out, "not confirmed by the replicas") {
			t.Errorf("a move whose hold the source's replica never confirms: %v, want it stopped at the hold", err)
		}
		notFlipped(t, s)
		if got := dumpQueue(t, s.src, "billing"); !mapsEqual(got, before) {
			t.Errorf("scripts-b holds %d keys of billing after the stopped move, want its %d keys unchanged", len(got), len(before))
		}

		// The replica back, --resume completes the move.
		if err := replica.Thaw(); err != nil {
			t.Fatal(err)
		}
		waitTakesWrites(t, s.src)
		out, err = s.run(t, "move", "billing", "--resume")
		if err != nil || !strings.Contains(out, "moved billing from scripts-b to module-a") {
			t.Fatalf("resume once the replica is back: %v", err)
		}
		for _, id := range ids {
			if n := inSets(t, s.dst, "billing", id); n != 1 {
				t.Errorf("after the move, job %s is in %d sets of module-a", id, n)
			}
		}
	})

	t.Run("release", func(t *testing.T) {
		s, replica := startSourceSetStand(t)
		fillQueue(t, s.src, "billing", 20)
		s.killAfter(t, "held", "move", "billing", "--to", "module-a")
		if err := replica.Freeze(); err != nil {
			t.Fatal(err)
		}
		// A resume at step held releases the queue first (what changed
		// since the mover died is unknown) and copies again while served.
		out, err := s.run(t, "move", "billing", "--resume", "--deadline", "0")
		if err == nil || !strings.Contains(out, "releasing billing") || !strings.Contains(out, "not confirmed by the replicas") {
			t.Errorf("a resume whose release the source's replica never confirms: %v, want it stopped at the release", err)
		}
		notFlipped(t, s)
		if err := replica.Thaw(); err != nil {
			t.Fatal(err)
		}
		waitTakesWrites(t, s.src)
		st, _ := s.run(t, "status")
		if !strings.Contains(st, "MOVE billing") {
			t.Errorf("the stopped move's record is gone; --resume and --abort need it:\n%s", st)
		}
	})

	t.Run("abort", func(t *testing.T) {
		s, replica := startSourceSetStand(t)
		ids := fillQueue(t, s.src, "billing", 20)
		s.killAfter(t, "held", "move", "billing", "--to", "module-a")
		if err := replica.Freeze(); err != nil {
			t.Fatal(err)
		}
		// --deadline 3s: the abort waits for the replica, as for any
		// fault, up to its --deadline, then reports what is not confirmed.
		out, err := s.run(t, "move", "billing", "--abort", "--deadline", "3s")
		if err == nil || !strings.Contains(out, "not confirmed by the replicas") || !strings.Contains(out, "--abort again") {
			t.Errorf("an abort the source's replica never confirms: %v, want it reported, with what to do", err)
		}
		notFlipped(t, s)
		if err := replica.Thaw(); err != nil {
			t.Fatal(err)
		}
		waitTakesWrites(t, s.src)
		st, _ := s.run(t, "status")
		if strings.Contains(st, "MOVE billing") || strings.Contains(st, "billing: held") {
			t.Errorf("after the abort billing must be served by scripts-b with no move:\n%s", st)
		}
		for _, id := range ids {
			if n := inSets(t, s.src, "billing", id); n != 1 {
				t.Errorf("after the abort, job %s is in %d sets of scripts-b", id, n)
			}
		}
	})
}
