package limits

import (
	"errors"
	"testing"
	"time"
)

// waitFor polls cond until it holds, or fails the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBudgetInputWaitsRepliesDoNot: input that does not fit waits, in
// order, until bytes are given back; what cannot wait gets what fits or
// nothing; one holder of part of a command may go past the limit.
func TestBudgetInputWaitsRepliesDoNot(t *testing.T) {
	b := NewBudget(100)
	if b.Limit() != 100 {
		t.Fatalf("limit %d", b.Limit())
	}
	if err := b.Take(1, 80, false); err != nil {
		t.Fatal(err)
	}
	if b.TryTake(30) {
		t.Error("TryTake past the limit succeeded")
	}
	if !b.TryTake(20) {
		t.Error("TryTake within the limit failed")
	}
	got := make(chan error, 1)
	go func() { got <- b.Take(2, 50, false) }()
	waitFor(t, "the input to wait", func() bool { _, waits := b.InUse(); return waits == 1 })
	select {
	case err := <-got:
		t.Fatalf("a take past the limit returned at once: %v", err)
	default:
	}
	b.Give(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if used, _ := b.InUse(); used != 90 {
		t.Errorf("used %d, want 90", used)
	}

	// A holder goes past the limit, one at a time; Done lets the next one.
	if err := b.Take(3, 50, true); err != nil {
		t.Fatal(err)
	}
	b.Force(10)
	if used, _ := b.InUse(); used != 150 {
		t.Errorf("used %d, want 150", used)
	}
	got2 := make(chan error, 1)
	go func() { got2 <- b.Take(4, 10, true) }()
	waitFor(t, "the second holder to wait", func() bool { _, waits := b.InUse(); return waits == 2 })
	b.Done(3)
	if err := <-got2; err != nil {
		t.Fatal(err)
	}

	// Close ends every wait; later takes fail.
	got3 := make(chan error, 1)
	go func() { got3 <- b.Take(5, 1000, false) }()
	waitFor(t, "the third input to wait", func() bool { _, waits := b.InUse(); return waits == 3 })
	b.Close()
	if err := <-got3; !errors.Is(err, ErrClosed) {
		t.Errorf("a waiting take after Close: %v", err)
	}
	if err := b.Take(6, 1, false); !errors.Is(err, ErrClosed) {
		t.Errorf("a take after Close: %v", err)
	}
}
