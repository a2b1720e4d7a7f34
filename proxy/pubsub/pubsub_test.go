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
