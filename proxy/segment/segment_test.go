package segment

import (
	"net"
	"testing"

	"github.com/emqproxy/emqproxy/proxy/conn"
	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/pipe"
)

// out is a client connection whose output Emit fills (nothing is
// written to it).
func out(t *testing.T) *conn.Conn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return conn.New(a, conn.Options{Mem: limits.NewBudget(1 << 20)})
}

// reply appends one reply to the batch of part i, as its reader does.
func reply(g *Segment, i int, r string) {
	b := g.Parts[i].B
	b.Replies = append(b.Replies, r...)
	b.Ends = append(b.Ends, len(b.Replies))
}

// forward adds a forwarded command's slot to the current part.
func forward(g *Segment, drop bool) {
	g.Forwarded(-1, nil, drop, nil)
	g.Parts[g.Cur].B.N++
}

func newSegment() *Segment { return &Segment{Mem: limits.NewBudget(1 << 20), Simple: true} }

// TestEmitInCommandOrder: replies of two connections and local ones come
// out in the order of the commands, whatever part each is in.
func TestEmitInCommandOrder(t *testing.T) {
	g := newSegment()
	var obs observe.Session
	g.Cur = g.Add(nil, &pipe.Pipe{}, false, false)
	forward(g, false) // 1: part 0
	g.AddLocal([]byte("+local\r\n"), -1, false)
	g.Cur = g.Add(nil, &pipe.Pipe{}, false, false)
	forward(g, false) // 3: part 1
	g.Cur = 0
	forward(g, false) // 4: part 0
	if g.Simple {
		t.Fatal("a segment of two parts and a local reply is Simple")
	}
	reply(g, 0, ":1\r\n")
	reply(g, 0, ":4\r\n")
	reply(g, 1, ":3\r\n")
	c := out(t)
	if over, closing := g.Emit(c, &obs, nil, 1<<20); over || closing {
		t.Fatalf("over %v closing %v", over, closing)
	}
	if got, want := string(c.Out), ":1\r\n+local\r\n:3\r\n:4\r\n"; got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
	g.Reset()
	if len(g.Parts) != 0 || len(g.Slots) != 0 || len(g.Local) != 0 || !g.Simple || len(g.spare) != 2 {
		t.Fatalf("after Reset: %d parts, %d slots, %d local bytes, simple %v, %d spare", len(g.Parts), len(g.Slots), len(g.Local), g.Simple, len(g.spare))
	}
}

// TestEmitSimpleAdoptsTheReplies: one part whose replies are all the
// client's becomes the output as it is.
func TestEmitSimpleAdoptsTheReplies(t *testing.T) {
	g := newSegment()
	var obs observe.Session
	g.Cur = g.Add(nil, &pipe.Pipe{}, false, false)
	forward(g, false)
	forward(g, false)
	if !g.Simple {
		t.Fatal("one part, in order: not Simple")
	}
	reply(g, 0, "+a\r\n")
	reply(g, 0, "+b\r\n")
	replies := g.Parts[0].B.Replies
	c := out(t)
	g.Emit(c, &obs, nil, 1<<20)
	if string(c.Out) != "+a\r\n+b\r\n" || &c.Out[0] != &replies[0] {
		t.Fatalf("output %q, copied: %v", c.Out, &c.Out[0] != &replies[0])
	}
}

// TestEmitDropsAndCloses: a dropped reply (CLIENT REPLY) is not written;
// one that says its connection was lost closes the client, whose outcome
// it cannot otherwise learn.
func TestEmitDropsAndCloses(t *testing.T) {
	g := newSegment()
	var obs observe.Session
	g.Cur = g.Add(nil, &pipe.Pipe{}, false, false)
	forward(g, true)
	forward(g, false)
	reply(g, 0, "+dropped\r\n")
	reply(g, 0, "+kept\r\n")
	c := out(t)
	if _, closing := g.Emit(c, &obs, nil, 1<<20); closing || string(c.Out) != "+kept\r\n" {
		t.Fatalf("output %q, closing %v", c.Out, closing)
	}
	g.Reset()
	c.Out = c.Out[:0]
	g.Cur = g.Add(nil, &pipe.Pipe{}, false, false)
	forward(g, true)
	lost := []byte("-UPSTREAM connection to x lost; the command may have been applied\r\n")
	g.Parts[0].B.Fill(lost) // the same text, not marked lost by the pipe
	if _, closing := g.Emit(c, &obs, nil, 1<<20); closing || len(c.Out) != 0 {
		t.Fatalf("a dropped error reply: output %q, closing %v", c.Out, closing)
	}
	g.Reset()
	g.Cur = g.Add(nil, &pipe.Pipe{}, false, false)
	forward(g, false)
	forward(g, true)
	reply(g, 0, "+kept\r\n")
	g.Parts[0].B.FillLost(lost)
	if _, closing := g.Emit(c, &obs, nil, 1<<20); !closing || string(c.Out) != "+kept\r\n" {
		t.Fatalf("a lost dropped reply: output %q, closing %v", c.Out, closing)
	}
}

// TestEmitOverTheCap: past maxReply nothing is moved.
func TestEmitOverTheCap(t *testing.T) {
	g := newSegment()
	var obs observe.Session
	g.AddLocal([]byte("+0123456789\r\n"), -1, false)
	c := out(t)
	if over, _ := g.Emit(c, &obs, nil, 10); !over || len(c.Out) != 0 {
		t.Fatalf("over %v, output %q", over, c.Out)
	}
}

// TestApart: a dedicated connection's part is a segment of its own.
func TestApart(t *testing.T) {
	g := newSegment()
	if g.Apart(true) {
		t.Fatal("an empty segment must be sent before a dedicated part")
	}
	g.Add(nil, &pipe.Pipe{}, false, false)
	if g.Apart(false) || !g.Apart(true) {
		t.Fatalf("shared then: Apart(false) %v, Apart(true) %v", g.Apart(false), g.Apart(true))
	}
	g.Reset()
	g.Add(nil, &pipe.Pipe{}, true, false)
	if !g.Apart(false) {
		t.Fatal("a shared part joined a dedicated one")
	}
}
