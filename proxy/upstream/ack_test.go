package upstream

import (
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/proxy/pipe"
)

// ackBatch is a settled-to-be batch of one write (+OK) and what else
// follows: WAIT's reply for waitFull, nothing for waitShort.
func ackBatch(kind uint8, wait string) *pipe.Batch {
	b := pipe.NewBatch()
	b.Writes, b.Ack = []int{0}, kind
	b.Replies, b.Ends, b.N = []byte("+OK\r\n"), []int{5}, 1
	if kind != waitShort {
		b.Replies = append(b.Replies, wait...)
		b.Ends, b.N = append(b.Ends, len(b.Replies)), 2
	}
	return b
}

// A write found short is answered with what made the upstream short, even
// when a WAIT confirmed between its sending and its settling (the error
// once said "the last WAIT answered 1" then, against its own claim).
func TestShortErrorSaysWhatMadeItShort(t *testing.T) {
	a := newAckSpec(Options{Name: "node", AckReplicas: 1, AckTimeout: 300 * time.Millisecond})
	if n := a.settle(ackBatch(waitFull, ":0\r\n")); n != 1 || !a.short.Load() {
		t.Fatalf("a WAIT that answered 0: %d writes replaced, short %v", n, a.short.Load())
	}
	early := ackBatch(waitShort, "")
	if n := a.settle(ackBatch(waitFull, ":1\r\n")); n != 0 || a.short.Load() {
		t.Fatalf("a WAIT that answered 1: %d writes replaced, short %v", n, a.short.Load())
	}
	if n := a.settle(early); n != 1 {
		t.Fatalf("the write found short: %d replaced", n)
	}
	want := "-UPSTREAM node write not confirmed by 1 replicas (replicas short: the last WAIT answered 0; writes wait for them again once one confirms); the command may have been applied\r\n"
	if got := string(early.Replies); got != want {
		t.Fatalf("found short before the WAIT that confirmed:\n got %q\nwant %q", got, want)
	}

	a.setShort("the primary switched to 127.0.0.1:7000, whose replicas no WAIT has confirmed yet")
	b := ackBatch(waitShort, "")
	a.settle(b)
	if got := string(b.Replies); !strings.Contains(got, "(replicas short: the primary switched to 127.0.0.1:7000, whose replicas no WAIT has confirmed yet; ") {
		t.Fatalf("after a switch: %q", got)
	}
}
