package limits

import (
	"errors"
	"slices"
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

// TestBudgetWakesInOrderHoldersPastInput: input is granted in the order it
// waits, none past input that does not fit, but for a holder (it holds part
// of a command, and must not wait for room it holds itself).
func TestBudgetWakesInOrderHoldersPastInput(t *testing.T) {
	b := NewBudget(100)
	if err := b.Take(1, 100, false); err != nil {
		t.Fatal(err)
	}
	// A holder past the limit: the others wait for room like any input.
	if err := b.Take(9, 1, true); err != nil {
		t.Fatal(err)
	}
	type waiter struct {
		id     uint64
		n      int64
		holder bool
		done   chan error
	}
	ws := []*waiter{{id: 2, n: 60}, {id: 3, n: 10, holder: true}, {id: 4, n: 5}, {id: 5, n: 10, holder: true}}
	for i, w := range ws {
		w.done = make(chan error, 1)
		go func() { w.done <- b.Take(w.id, w.n, w.holder) }()
		waitFor(t, "the input to wait", func() bool { _, waits := b.InUse(); return waits == int64(i+1) })
	}
	waiting := func() []uint64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		var ids []uint64
		for _, w := range b.queue {
			ids = append(ids, w.id)
		}
		return ids
	}
	granted := func(w *waiter) {
		select {
		case err := <-w.done:
			if err != nil {
				t.Fatalf("take %d: %v", w.id, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("take %d not granted", w.id)
		}
	}
	// 30 free: the first input (60) does not fit; the holders behind it
	// (10 and 10) are granted past it, the input between them (5) is not.
	b.Give(31)
	if got := waiting(); !slices.Equal(got, []uint64{2, 4}) {
		t.Fatalf("waiting after room for 30: %v, want [2 4]", got)
	}
	granted(ws[1])
	granted(ws[3])
	// 70 free: the first input, then the one behind it.
	b.Give(60)
	if got := waiting(); len(got) != 0 {
		t.Fatalf("waiting after room for 70: %v, want none", got)
	}
	granted(ws[0])
	granted(ws[2])
	if used, _ := b.InUse(); used != 95 {
		t.Errorf("used %d, want 95", used)
	}
}

// BenchmarkGiveWithManyWaiting is a Give (one per batch answered) while
// 10,000 clients wait for room the Give does not make.
func BenchmarkGiveWithManyWaiting(b *testing.B) {
	m := NewBudget(1 << 20)
	m.used = m.limit
	for i := range 10_000 {
		m.queue = append(m.queue, &memWait{n: 1 << 16, id: uint64(i + 2), ready: make(chan struct{})})
	}
	for b.Loop() {
		m.Force(1)
		m.Give(1)
	}
}
