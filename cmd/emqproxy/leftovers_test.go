package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/control"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/stand/legacy"
)

// queueKeys is the number of keys of q on c.
func queueKeys(t *testing.T, c valkey.Client, q string) int {
	t.Helper()
	return len(dumpQueue(t, c, q))
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestQueueLeftovers: `queue leftovers` lists the keys of a queue on a node
// that does not own it, by the control table (billing, moved to module-a
// without --delete-source: the source's copy on scripts-b) or by the route
// (orders, routed to module-a, with keys on scripts-b), leaves alone the
// queues owned where they are (billing on module-a, orders on module-a,
// ledger on scripts-b) and a queue with a move in progress (ledger's keys on
// module-a, its record on scripts-b); exits 2 while leftovers remain;
// --remove deletes them and nothing else; an unreachable upstream refuses
// the listing.
func TestQueueLeftovers(t *testing.T) {
	s := startMoveStand(t, "")
	ctx := context.Background()
	for i := range 5 {
		writeJob(t, s.src, "billing", fmt.Sprintf("B%d", i))
		writeJob(t, s.src, "ledger", fmt.Sprintf("L%d", i))
		writeJob(t, s.dst, "orders", fmt.Sprintf("O%d", i))
	}
	writeJob(t, s.src, "orders", "stray") // orders is routed to module-a
	if out, err := s.run(t, "move", "billing", "--to", "module-a"); err != nil || !strings.Contains(out, "source keys kept on scripts-b") {
		t.Fatalf("move billing: %v", err)
	}
	// ledger: a move in progress (its record on the source), with keys of
	// it on the target already.
	writeJob(t, s.dst, "ledger", "L0")
	if err := s.src.Do(ctx, s.src.B().Hset().Key(table.MoveKey("ledger")).FieldValue().
		FieldValue("from", "scripts-b").FieldValue("to", "module-a").FieldValue("step", control.StepCopying).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	billingSrc, billingDst := queueKeys(t, s.src, "billing"), queueKeys(t, s.dst, "billing")
	ordersDst, ledgerSrc := queueKeys(t, s.dst, "orders"), queueKeys(t, s.src, "ledger")
	if billingSrc == 0 || billingSrc != billingDst {
		t.Fatalf("after the move: billing has %d keys on the source, %d on the target", billingSrc, billingDst)
	}

	out, err := s.run(t, "leftovers")
	if code := exitStatus(err); code != leftoversFound {
		t.Errorf("leftovers found: exit %d (%v), want %d", code, err, leftoversFound)
	}
	for _, want := range []string{
		fmt.Sprintf("scripts-b: queue billing: %d keys (owner module-a, by the control table)", billingSrc),
		"scripts-b: queue orders: 2 keys (owner module-a, by its route)",
		"skipped module-a: queue ledger: 2 keys: a move is in progress (its record is on scripts-b)",
		fmt.Sprintf("leftovers: %d keys of 2 queue(s) on 1 upstream(s), removed 0, skipped 1 queue(s) ([ledger])", billingSrc+2),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the listing lacks %q", want)
		}
	}
	if strings.Contains(out, "module-a: queue billing") || strings.Contains(out, "module-a: queue orders") || strings.Contains(out, "scripts-b: queue ledger") {
		t.Errorf("the listing names keys of a queue on its owner")
	}
	if queueKeys(t, s.src, "billing") != billingSrc || queueKeys(t, s.src, "orders") != 2 {
		t.Errorf("the listing without --remove deleted keys")
	}

	out, err = s.run(t, "leftovers", "--remove")
	if err != nil || !strings.Contains(out, fmt.Sprintf("removed %d, skipped 1 queue(s)", billingSrc+2)) {
		t.Errorf("leftovers --remove: %v", err)
	}
	for _, c := range []struct {
		name string
		c    valkey.Client
		q    string
		want int
	}{
		{"scripts-b", s.src, "billing", 0},
		{"scripts-b", s.src, "orders", 0},
		{"module-a", s.dst, "billing", billingDst},
		{"module-a", s.dst, "orders", ordersDst},
		{"scripts-b", s.src, "ledger", ledgerSrc},
		{"module-a", s.dst, "ledger", 2},
	} {
		if got := queueKeys(t, c.c, c.q); got != c.want {
			t.Errorf("after --remove %s holds %d keys of %s, want %d", c.name, got, c.q, c.want)
		}
	}
	// The control table is not a queue's: it stays.
	if n, _ := s.src.Do(ctx, s.src.B().Exists().Key(table.KeyQueues).Build()).AsInt64(); n != 1 {
		t.Errorf("--remove deleted scripts-b's control table")
	}

	// The move ends (aborted): ledger's keys on module-a are leftovers now.
	if err := s.src.Do(ctx, s.src.B().Del().Key(table.MoveKey("ledger")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	out, err = s.run(t, "leftovers", "--remove", "--list")
	if err != nil || !strings.Contains(out, "module-a: queue ledger: 2 keys (owner scripts-b, by its route)") ||
		!strings.Contains(out, "  "+legacy.JobKey("ledger", "L0")) || !strings.Contains(out, "removed 2, skipped 0 queue(s)") {
		t.Errorf("leftovers --remove after the move ended: %v", err)
	}
	if out, err = s.run(t, "leftovers"); err != nil || !strings.Contains(out, "leftovers: 0 keys of 0 queue(s) on 0 upstream(s), removed 0, skipped 0 queue(s)") {
		t.Errorf("leftovers on a clean fleet: %v", err)
	}

	// An unreachable upstream refuses: its table may give a queue to the
	// node the others call a non-owner.
	writeJob(t, s.src, "orders", "stray2")
	b, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	gone := fmt.Sprintf("    role: scripts\n  gone-c:\n    address: %q\n    role: module\n", freeAddr(t))
	if err := os.WriteFile(s.cfg, []byte(strings.Replace(string(b), "    role: scripts\n", gone, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := s.run(t, "leftovers", "--remove"); exitStatus(err) != 1 || !strings.Contains(out, "upstream gone-c is unreachable") {
		t.Errorf("leftovers with gone-c unreachable: %v, want a refusal naming it", err)
	}
	if queueKeys(t, s.src, "orders") != 2 {
		t.Errorf("a refused --remove deleted keys")
	}
}
