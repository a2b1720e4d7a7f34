package txn

import (
	"bytes"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// frame frames one command given as its arguments.
func frame(t *testing.T, args ...string) resp.Frame {
	t.Helper()
	var raw []byte
	raw = resp.AppendArray(raw, len(args))
	for _, a := range args {
		raw = resp.AppendBulkString(raw, a)
	}
	var fr resp.Framer
	fr.Limits = resp.Limits{MaxMultibulk: 1 << 20, MaxBulk: 1 << 30, MaxInline: 1 << 16}
	f, st, _, _, _ := fr.Next(raw)
	if st != resp.Framed {
		t.Fatalf("%q: status %v", args, st)
	}
	return f
}

// pass is a step forwarding the command as it is.
func pass() *plan.Step { return &plan.Step{Decision: rewrite.Decision{Action: rewrite.Pass}} }

func newTx(mem int64) *Tx {
	t := &Tx{Mem: limits.NewBudget(mem), MaxQueued: 3, MaxBytes: 1 << 20}
	t.Begin(0)
	return t
}

func TestQueueKeepsTheEncodedCommands(t *testing.T) {
	tx := newTx(1 << 20)
	set := frame(t, "SET", "k", "v")
	if o := tx.Queue(set, pass(), false); !o.Queued || o.Abort || !bytes.Equal(o.Reply, ReplyQueued) {
		t.Fatalf("SET: %+v", o)
	}
	want := append(append([]byte(nil), multiHead...), set.Raw...)
	if !bytes.Equal(tx.Buf, want) || tx.N != 1 {
		t.Fatalf("Buf %q N %d, want %q and 1", tx.Buf, tx.N, want)
	}
}

func TestQueueBounds(t *testing.T) {
	refused := &plan.Step{Decision: rewrite.Decision{Action: rewrite.Refuse, Effect: rewrite.AbortMulti, Reply: []byte("-ERR no\r\n")}}
	for _, tc := range []struct {
		name      string
		tx        *Tx
		step      *plan.Step
		aborted   bool
		reply     []byte
		abort     bool
		overBudge bool
	}{
		{"refused", newTx(1 << 20), refused, false, []byte("-ERR no\r\n"), true, false},
		{"already aborted", newTx(1 << 20), pass(), true, ReplyQueued, false, false},
		{"too many", func() *Tx { tx := newTx(1 << 20); tx.N = 3; return tx }(), pass(), false, ReplyTooLarge, true, false},
		{"too many bytes", func() *Tx { tx := newTx(1 << 20); tx.MaxBytes = 20; return tx }(), pass(), false, ReplyTooLarge, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, buf := tc.tx.N, len(tc.tx.Buf)
			o := tc.tx.Queue(frame(t, "SET", "k", "v"), tc.step, tc.aborted)
			if o.Queued || o.Abort != tc.abort || o.OverBudget != tc.overBudge || !bytes.Equal(o.Reply, tc.reply) {
				t.Fatalf("got %+v, want reply %q abort %v", o, tc.reply, tc.abort)
			}
			if tc.tx.N != n || len(tc.tx.Buf) != buf {
				t.Fatalf("kept it: N %d Buf %d bytes", tc.tx.N, len(tc.tx.Buf))
			}
		})
	}
}

// TestQueueTakesFromTheBudget: past FreeBytes the queued bytes are the
// budget's; a command it cannot give them to is refused and aborts, and
// Clear gives back what the transaction held.
func TestQueueTakesFromTheBudget(t *testing.T) {
	tx := newTx(16 << 10)
	tx.MaxQueued = 100
	big := strings.Repeat("x", 40<<10)
	if o := tx.Queue(frame(t, "SET", "a", big), pass(), false); !o.Queued {
		t.Fatalf("first 40 KiB: %+v", o)
	}
	if used, _ := tx.Mem.InUse(); used != 0 {
		t.Fatalf("budget holds %d under FreeBytes", used)
	}
	if o := tx.Queue(frame(t, "SET", "b", strings.Repeat("y", 30<<10)), pass(), false); !o.Queued {
		t.Fatalf("second: %+v", o)
	}
	used, _ := tx.Mem.InUse()
	if used <= 0 || used != tx.Held {
		t.Fatalf("budget holds %d, Held %d", used, tx.Held)
	}
	o := tx.Queue(frame(t, "SET", "c", big), pass(), false)
	if o.Queued || !o.Abort || !o.OverBudget || !bytes.Equal(o.Reply, ReplyOverBudget) {
		t.Fatalf("over the budget: %+v", o)
	}
	tx.Clear()
	if used, _ := tx.Mem.InUse(); used != 0 || tx.Held != 0 {
		t.Fatalf("after Clear the budget holds %d, Held %d", used, tx.Held)
	}
}

// TestHandAndRelease: a buffer handed to a batch keeps what it holds of
// the budget until Release says it may be given back.
func TestHandAndRelease(t *testing.T) {
	tx := newTx(1 << 20)
	tx.MaxQueued = 10
	tx.Queue(frame(t, "SET", "a", strings.Repeat("x", 70<<10)), pass(), false)
	held := tx.Held
	if held <= 0 {
		t.Fatalf("Held %d", held)
	}
	if buf := tx.Hand(); len(buf) == 0 || tx.Buf != nil || tx.Held != 0 || tx.Sent != held {
		t.Fatalf("Hand: %d bytes, Buf %v, Held %d, Sent %d", len(buf), tx.Buf != nil, tx.Held, tx.Sent)
	}
	if n := tx.Release(false); n != held || tx.Sent != 0 {
		t.Fatalf("Release: %d, Sent %d; want %d, 0", n, tx.Sent, held)
	}
}

// TestRanKeepsTheLoadsEXECRan: a load is kept when its element of EXEC's
// reply is a sha; none when the transaction was discarded.
func TestRanKeepsTheLoadsEXECRan(t *testing.T) {
	tx := newTx(1 << 20)
	tx.Queue(frame(t, "SCRIPT", "LOAD", "return 1"), pass(), false)
	tx.Queue(frame(t, "SET", "k", "v"), pass(), false)
	tx.Queue(frame(t, "script", "load", "return 2"), pass(), false)
	if len(tx.Loads) != 2 || tx.Loads[0].At != 0 || tx.Loads[1].At != 2 {
		t.Fatalf("Loads %+v", tx.Loads)
	}
	cp := func() []Load { return append([]Load(nil), tx.Loads...) }
	if got := Ran(cp(), []byte("*3\r\n$3\r\nabc\r\n+OK\r\n-ERR compile\r\n")); len(got) != 1 || got[0].At != 0 {
		t.Fatalf("one ran: %+v", got)
	}
	if got := Ran(cp(), []byte("*-1\r\n")); len(got) != 0 {
		t.Fatalf("a failed WATCH ran %+v", got)
	}
	if got := Ran(cp(), []byte("-EXECABORT Transaction discarded\r\n")); len(got) != 0 {
		t.Fatalf("EXECABORT ran %+v", got)
	}
}
