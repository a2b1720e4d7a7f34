package pipe

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestPipeHoldsWritesBehindAWait: while a WAIT is in flight (no replica;
// its timeout far off, the test ends it with CLIENT UNBLOCK when it is
// done looking), write batches that end with a WAIT of their own
// are held, not written, and leave in one write with one WAIT once the
// first is answered; a read is not held. The server counts the WAITs it
// ran: two for three write batches (one for each without the hold). Both
// readers: a session inline (a shared connection) and the reader
// goroutine (a dedicated one).
func TestPipeHoldsWritesBehindAWait(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		for _, bg := range []bool{false, true} {
			name := "inline"
			if bg {
				name = "goroutine"
			}
			t.Run(name, func(t *testing.T) { testPipeHoldsWritesBehindAWait(t, srv, bg) })
		}
	})
}

func testPipeHoldsWritesBehindAWait(t *testing.T, srv node.Server, bg bool) {
	n := pipeNode(t, srv)
	p := dialPipe(t, n.Addr, &faultConn{}, testTimeout, bg)
	wait := resp.AppendCommand(nil, "WAIT", "1", "10000") // below the pipe's reply timeout
	// unblock waits for a WAIT to block on the server and ends it (it
	// answers 0, as when it times out).
	unblock := func() {
		t.Helper()
		var id string
		node.Poll(t, "a WAIT to block", func() bool {
			raw, err := node.RawDo(n.Addr, "CLIENT", "LIST")
			if err != nil {
				return false
			}
			for line := range strings.SplitSeq(string(raw), "\n") {
				if strings.Contains(line, " cmd=wait ") {
					id = strings.TrimPrefix(strings.Fields(line)[0], "id=")
					return true
				}
			}
			return false
		})
		if raw, err := node.RawDo(n.Addr, "CLIENT", "UNBLOCK", id); err != nil || string(raw) != ":1\r\n" {
			t.Fatalf("CLIENT UNBLOCK %s: %q %v", id, raw, err)
		}
	}
	write := func() *Batch {
		b := incrBatch(1)
		b.Out = append(b.Out, wait...)
		b.N++
		b.WaitLen = len(wait)
		return b
	}

	first := write()
	firstDone := sendAwait(p, first)
	node.Poll(t, "the first WAIT to block", func() bool {
		raw, err := node.RawDo(n.Addr, "INFO", "clients")
		return err == nil && bytes.Contains(raw, []byte("blocked_clients:1\r\n"))
	})

	read := NewBatch()
	read.Out = resp.AppendCommand(nil, "GET", "ctr")
	read.N, read.Max = 1, 1<<20
	readDone := sendAwait(p, read)
	pipeState(t, p, "the read written behind the WAIT", func() bool {
		return len(p.queue) == 0 && len(p.inflight)-p.head == 2
	})

	held := []*Batch{write(), write()}
	var heldDone []<-chan struct{}
	for i, b := range held {
		heldDone = append(heldDone, sendAwait(p, b))
		pipeState(t, p, "the writes held", func() bool { return len(p.queue) == i+1 })
	}
	p.mu.Lock()
	inflight := len(p.inflight) - p.head
	p.mu.Unlock()
	if inflight != 2 {
		t.Errorf("%d batches in flight while the writes are held, want 2 (the WAIT's and the read)", inflight)
	}

	unblock() // the first WAIT: the held batches leave, with one WAIT
	finishes(t, "the first batch", firstDone)
	finishes(t, "the read", readDone)
	unblock() // theirs
	for i, d := range heldDone {
		finishes(t, "a held batch", d)
		if got, want := string(held[i].Replies), fmt.Sprintf(":%d\r\n:0\r\n", i+2); got != want {
			t.Errorf("held batch %d replies %q, want its INCR's and the shared WAIT's :0", i, got)
		}
	}
	if got := string(first.Replies); got != ":1\r\n:0\r\n" {
		t.Errorf("first batch replies %q", got)
	}
	if got := string(read.Replies); got != "$1\r\n1\r\n" {
		t.Errorf("read replies %q, want the value before the held writes", got)
	}

	raw, err := node.RawDo(n.Addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := node.ParseCommandStats(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	if stats["wait"] != 2 || stats["incr"] != 3 {
		t.Errorf("the server ran %d WAIT and %d INCR, want 2 and 3", stats["wait"], stats["incr"])
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitOut {
		t.Errorf("a WAIT still noted in flight after every batch was answered")
	}
}
