package pubsub

import (
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// Tap is what the bridge's relay does with the server's next reply (not a
// push) in place of passing it on as it is: answer Reply instead (nil:
// drop it), or, with Pass, pass it on patched (SCRIPT EXISTS); a capture
// record (package observe) gets the server's reply either way.
type Tap struct {
	Reply []byte
	Pass  bool
	Patch [][]byte    // SCRIPT EXISTS args (copies)
	Map   *shamap.Map // the map the patch answers from
	Rec   observe.Captured
	Keep  *[]byte // gets a copy of the server's reply (an EXEC's)
	// Nested: the reply (an EXEC's) may hold subscribe confirmations,
	// which keep the client's counts (Counts.noteNested).
	Nested bool
}

// apply returns what the client gets for the server's reply fr.
func (t *Tap) apply(fr []byte) []byte {
	t.Rec.Reply(fr)
	if t.Keep != nil {
		*t.Keep = append([]byte(nil), fr...)
	}
	if !t.Pass {
		return t.Reply
	}
	if t.Patch != nil {
		if p, err := rewrite.PatchScriptExists(fr, t.Patch, t.Map); err == nil {
			return p
		}
	}
	return fr
}

// Swap makes the relay answer reply in place of the server's next reply
// (not a push) after those already to be swapped; nil drops it. Only after
// a barrier: then the next replies are known.
func (sub *Subscriber) Swap(reply []byte) { sub.SwapTap(Tap{Reply: reply}) }

// SwapTap makes the relay do t with the server's next reply, as Swap.
func (sub *Subscriber) SwapTap(t Tap) {
	sub.mu.Lock()
	sub.swaps = append(sub.swaps, t)
	sub.swapN.Store(int32(len(sub.swaps)))
	sub.mu.Unlock()
}

// nextSwap takes what to do with the server's next reply.
func (sub *Subscriber) nextSwap() Tap {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	t := sub.swaps[0]
	sub.swaps[0] = Tap{}
	sub.swaps = sub.swaps[1:]
	sub.swapN.Store(int32(len(sub.swaps)))
	return t
}
