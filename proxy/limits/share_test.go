package limits

import (
	"testing"
	"time"
)

// TestShareWindowAndIsolation follows one client's share through the
// decisions the session asks of it: the window grows over full parts of
// small replies, large replies or too many full parts isolate, and the
// isolation ends once it has run its time.
func TestShareWindowAndIsolation(t *testing.T) {
	sh := Share{Commands: 64, Bytes: 64 << 10}
	if sh.Isolated() || sh.Window() != ShareStart {
		t.Fatalf("a new share: isolated %v, window %d, want sharing with window %d", sh.Isolated(), sh.Window(), ShareStart)
	}
	// A full part of small replies doubles the window, up to Commands
	// (fewer than SharePipelineParts of them in a row).
	for _, want := range []int{16, 32, 64} {
		sh.Full()
		if r := sh.After(sh.Window(), 100, false, false); r != "" {
			t.Fatalf("a full part of small replies isolated (%s)", r)
		}
		if sh.Window() != want {
			t.Fatalf("window %d, want %d", sh.Window(), want)
		}
	}
	// A part that is not full starts the count of full ones again.
	if r := sh.After(1, 10, false, false); r != "" || sh.full != 0 {
		t.Fatalf("a short part: reason %q, full %d", r, sh.full)
	}
	// SharePipelineParts full parts in a row: pipeline.
	for range SharePipelineParts {
		sh.Full()
	}
	if r := sh.After(sh.Window(), 100, false, false); r != IsoPipeline {
		t.Fatalf("after %d full parts: %q, want %q", SharePipelineParts, r, IsoPipeline)
	}
	// Replies past Bytes, or past the reply cap: reply_bytes.
	if r := sh.After(1, sh.Bytes+1, false, false); r != IsoReplyBytes {
		t.Fatalf("large replies: %q", r)
	}
	if r := sh.After(1, 1, true, false); r != IsoReplyBytes {
		t.Fatalf("replies over the cap: %q", r)
	}
	// Heavy commands.
	if r := sh.Heavy(int(sh.Bytes)+1, 1); r != IsoCommandBytes {
		t.Fatalf("a large command: %q", r)
	}
	if r := sh.Heavy(10, sh.Commands+1); r != IsoPipeline {
		t.Fatalf("a long transaction: %q", r)
	}
	if r := sh.Heavy(10, sh.Commands); r != "" {
		t.Fatalf("a command within the share: %q", r)
	}

	now := time.Unix(1000, 0)
	if !sh.Isolate(now, time.Minute) {
		t.Fatal("the first isolation was not reported as such")
	}
	if sh.Isolate(now.Add(time.Second), time.Minute) {
		t.Fatal("a renewed isolation was reported as the first")
	}
	if sh.Due(now.Add(time.Minute)) {
		t.Fatal("due before its renewed time ran out")
	}
	// On its own connection a part still heavy keeps it isolated.
	if r := sh.After(sh.Commands, 10, false, true); r != IsoReplyBytes {
		t.Fatalf("a full part on its own connection: %q", r)
	}
	if r := sh.After(1, 10, false, true); r != "" {
		t.Fatalf("a light part on its own connection: %q", r)
	}
	if !sh.Due(now.Add(time.Minute + time.Second)) {
		t.Fatal("not due once its time ran out")
	}
	if !sh.Rejoin() || sh.Isolated() || sh.Rejoin() {
		t.Fatal("Rejoin: the isolation did not end once")
	}
	if SlowReader(SlowWrite) != "" || SlowReader(SlowWrite+time.Millisecond) != IsoSlowReader {
		t.Fatal("SlowReader")
	}
}
