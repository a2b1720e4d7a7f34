package pubsub

import "testing"

func TestKindOf(t *testing.T) {
	for name, want := range map[string]SubKind{
		"subscribe": SubForward, "PSUBSCRIBE": SubForward, "sunsubscribe": SubForward, "Ping": SubForward,
		"quit": SubQuit, "RESET": SubReset, "GET": SubOther, "SUBSCRIBEX": SubOther, "PUNSUBSCRIBEXX": SubOther,
	} {
		if got := KindOf([]byte(name)); got != want {
			t.Errorf("KindOf(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestCountsFollowConfirmationsInExec: the confirmations of subscribe
// commands queued in MULTI, elements of EXEC's reply, keep the counts; the
// other elements, and a reply that is not an array, change nothing.
func TestCountsFollowConfirmationsInExec(t *testing.T) {
	var c Counts
	c.note([]byte(">3\r\n$9\r\nsubscribe\r\n$3\r\nbaz\r\n:3\r\n"), true)
	exec := "*5\r\n$3\r\nabc\r\n" +
		">3\r\n$11\r\nunsubscribe\r\n$3\r\nbar\r\n:2\r\n" +
		">3\r\n$11\r\nunsubscribe\r\n$3\r\nbaz\r\n:1\r\n" +
		">3\r\n$10\r\nssubscribe\r\n$2\r\nsh\r\n:1\r\n" +
		"*3\r\n$11\r\nunsubscribe\r\n$1\r\nx\r\n:0\r\n" // an array, not a push: a value, not a confirmation
	c.noteNested([]byte(exec), true)
	if sub, psub, ssub := c.Get(); sub != 1 || psub != 0 || ssub != 1 {
		t.Fatalf("after EXEC: %d %d %d, want 1 0 1", sub, psub, ssub)
	}
	c.noteNested([]byte("-EXECABORT Transaction discarded\r\n"), true)
	c.noteNested([]byte("*1\r\n$3\r\nabc"), true) // truncated: ignored
	if sub, _, ssub := c.Get(); sub != 1 || ssub != 1 {
		t.Fatalf("after replies with no confirmation: %d %d, want 1 1", sub, ssub)
	}
}

// TestCountsFollowTheConfirmations: the counts are the server's, read
// from its confirmations in both protocols; channels and patterns share
// one count, shard channels have their own.
func TestCountsFollowTheConfirmations(t *testing.T) {
	var c Counts
	c.note([]byte("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"), false)
	c.note([]byte("*3\r\n$10\r\npsubscribe\r\n$2\r\np*\r\n:2\r\n"), false)
	c.note([]byte(">3\r\n$10\r\nssubscribe\r\n$2\r\nsh\r\n:1\r\n"), false) // a push, not RESP2's: ignored
	if sub, psub, ssub := c.Get(); sub != 1 || psub != 1 || ssub != 0 {
		t.Fatalf("after subscribe, psubscribe: %d %d %d, want 1 1 0", sub, psub, ssub)
	}
	c.note([]byte(">3\r\n$10\r\nssubscribe\r\n$2\r\nsh\r\n:1\r\n"), true)
	if _, _, ssub := c.Get(); ssub != 1 {
		t.Fatalf("ssubscribe push: ssub %d, want 1", ssub)
	}
	c.note([]byte("*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:1\r\n"), false)
	if sub, psub, _ := c.Get(); sub != 0 || psub != 1 {
		t.Fatalf("after unsubscribe: %d %d, want 0 1", sub, psub)
	}
	if !c.Any() {
		t.Fatal("Any: false with a pattern and a shard channel")
	}
	c.Clear()
	if c.Any() {
		t.Fatal("Any: true after Clear")
	}
}

func TestLeftAll(t *testing.T) {
	for r, want := range map[string]bool{
		"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n":     true,
		"*3\r\n$12\r\npunsubscribe\r\n$2\r\np*\r\n:0\r\n":    true,
		"*3\r\n$12\r\nsunsubscribe\r\n$2\r\nsh\r\n:0\r\n":    true,
		"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:1\r\n":     false,
		"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\n:0\r\n":    false,
		"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:10\r\n:0\r\n": false,
	} {
		if got := leftAll([]byte(r)); got != want {
			t.Errorf("leftAll(%q) = %v, want %v", r, got, want)
		}
	}
}

// TestTapAnswersInPlaceOfTheServer: a tap drops, replaces or passes the
// server's reply, and keeps a copy when asked.
func TestTapAnswersInPlaceOfTheServer(t *testing.T) {
	fr := []byte("+OK\r\n")
	if got := (&Tap{}).apply(fr); got != nil {
		t.Errorf("a drop passed %q", got)
	}
	if got := (&Tap{Reply: []byte("+QUEUED\r\n")}).apply(fr); string(got) != "+QUEUED\r\n" {
		t.Errorf("a swap answered %q", got)
	}
	var kept []byte
	if got := (&Tap{Pass: true, Keep: &kept}).apply(fr); string(got) != "+OK\r\n" || string(kept) != "+OK\r\n" {
		t.Errorf("a pass answered %q and kept %q", got, kept)
	}
	fr[0] = '-'
	if string(kept) != "+OK\r\n" {
		t.Error("the kept reply shares the relay's buffer")
	}
}

// TestEndedUntilForgotten: a session that ended is refused as a relay's
// target until the server unlists it (Forget), and then forgotten: the
// marks are the sessions between End and Forget, whatever their number,
// and ending one looks at no other (a burst of 20,000 ends, none of them
// unlisted yet, as when a fleet of clients drops at once).
func TestEndedUntilForgotten(t *testing.T) {
	var r Redirects
	const n = 20_000
	for id := uint64(1); id <= n; id++ {
		r.End(id)
	}
	for _, id := range []uint64{1, n / 2, n} {
		if !r.Ended(id) {
			t.Fatalf("session %d ended and still listed: Ended = false", id)
		}
		if r.add(&RedirConn{Target: id}) {
			t.Fatalf("a relay to session %d, which ended, was registered", id)
		}
	}
	if r.Ended(n + 1) {
		t.Fatal("a live session is reported ended")
	}
	if !r.add(&RedirConn{Target: n + 1}) {
		t.Fatal("a relay to a live session was refused")
	}
	for id := uint64(1); id <= n; id++ {
		r.Forget(id)
	}
	if r.Ended(n / 2) {
		t.Fatal("a session unlisted by the server is still marked ended")
	}
	if len(r.ended) != 0 {
		t.Fatalf("%d sessions still marked after every one was unlisted", len(r.ended))
	}
}
