package rewrite

import "testing"

// TestReplyMode follows the server's CLIENT REPLY: OFF drops until ON,
// SKIP drops the next command's reply only (not its own), SKIP under OFF
// does nothing, RESET ends OFF but a SKIP just before it still silences
// the +RESET.
func TestReplyMode(t *testing.T) {
	type step struct {
		e    Effect
		drop bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"off then on", []step{{NoEffect, false}, {ReplyOff, true}, {NoEffect, true}, {ReplyOn, false}, {NoEffect, false}}},
		{"skip", []step{{ReplySkip, false}, {NoEffect, true}, {NoEffect, false}}},
		{"skip then on", []step{{ReplySkip, false}, {ReplyOn, false}, {NoEffect, false}}},
		{"skip under off", []step{{ReplyOff, true}, {ReplySkip, true}, {ReplyOn, false}, {NoEffect, false}}},
		{"reset ends off", []step{{ReplyOff, true}, {Reset, false}, {NoEffect, false}}},
		{"skip before reset", []step{{ReplySkip, false}, {Reset, true}, {NoEffect, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m ReplyMode
			for i, s := range tc.steps {
				if got := m.Command(s.e); got != s.drop {
					t.Fatalf("step %d (effect %v): drop %v, want %v", i, s.e, got, s.drop)
				}
			}
		})
	}
	var m ReplyMode
	m.Command(ReplyOff)
	if !m.Muted() {
		t.Fatal("OFF is not muted")
	}
}
