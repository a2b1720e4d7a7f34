package txn

import (
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The refusals of a command that would not fit in its transaction.
var (
	ErrTooLarge   = clienterr.New(clienterr.Proxy, "transaction too large; it will be discarded at EXEC")
	ErrOverBudget = clienterr.New(clienterr.Proxy, "the proxy's memory budget (limits.buffered_bytes) is in use by other clients; the transaction will be discarded at EXEC")
)

// Replies of a transaction's commands.
var (
	ReplyQueued     = []byte("+QUEUED\r\n")
	ReplyTooLarge   = clienterr.Reply(ErrTooLarge)
	ReplyOverBudget = clienterr.Reply(ErrOverBudget)
	multiHead       = []byte("*1\r\n$5\r\nMULTI\r\n")
)

// FreeBytes are the bytes of a transaction's queued commands not taken
// from the memory budget.
const FreeBytes = 64 << 10

// Tx is one client's transaction. The zero value with its bounds set
// (Mem, MaxQueued, MaxBytes) is ready for Begin.
type Tx struct {
	Mem       *limits.Budget // what Buf holds past FreeBytes is taken from it
	MaxQueued int            // the most commands queued (limits.max_queued_multi)
	MaxBytes  int64          // the most bytes queued (limits.max_reply_bytes)
	Acking    bool           // note whether a queued command is a write (Writes)

	Buf []byte // MULTI and the queued commands, encoded
	N   int    // queued commands
	// Slots are the session's reply slots of MULTI and each queued
	// command, and SameSegment says they are still in its current segment
	// (nothing sent since MULTI): then the server's own replies to MULTI
	// and the queued commands take their places.
	Slots       []int
	SameSegment bool
	// Route is what the queued commands tell of the transaction's route,
	// which the plan reads (plan.Binding.Tx).
	Route plan.TxRoute
	// Held is what Buf holds of the memory budget (its bytes past
	// FreeBytes); Sent is what it held when it was sent at EXEC (the batch
	// owns it), given back once the replies are written.
	Held, Sent int64
	// Writes: a queued command is a write, so EXEC's reply waits for the
	// replicas where the upstream asks for them (upstream/ack.go).
	Writes bool
	// Loads are the queued SCRIPT LOADs (see Ran).
	Loads []Load
}

// Load is a SCRIPT LOAD queued in a transaction: At is its place among the
// queued commands (its reply's in EXEC's array), Raw its bytes (a copy).
type Load struct {
	At  int
	Raw []byte
}

// Begin starts a transaction whose MULTI's reply is the session's slot.
func (t *Tx) Begin(slot int) {
	t.Buf = append(t.Buf[:0], multiHead...)
	t.N = 0
	t.Slots = append(t.Slots[:0], slot)
	t.SameSegment = true
	t.forget()
}

// forget drops what the transaction knows of its route, writes and loads.
func (t *Tx) forget() {
	t.Route.Forget()
	t.Writes = false
	clear(t.Loads)
	t.Loads = t.Loads[:0]
}

// Clear drops the transaction, giving back what it held of the budget.
func (t *Tx) Clear() {
	t.Mem.Give(t.Held)
	t.Held = 0
	if cap(t.Buf) > 1<<20 {
		t.Buf = nil
	}
	t.Buf = t.Buf[:0]
	t.N = 0
	t.Slots = t.Slots[:0]
	t.SameSegment = false
	t.forget()
}

// Outcome is what Queue did with a command.
type Outcome struct {
	Reply      []byte // the client's reply to it
	Queued     bool   // it is in Buf
	Abort      bool   // the transaction is now to be discarded at EXEC
	OverBudget bool   // the bound it crossed is the memory budget's
}

// Queue queues a command decided inside MULTI (f, decided into sp) and says
// what the client is answered: the plan's refusal (which may abort the
// transaction), +QUEUED, or the error of a bound it would cross, which
// aborts it. A transaction already aborted keeps nothing more (+QUEUED,
// as the server answers).
func (t *Tx) Queue(f resp.Frame, sp *plan.Step, aborted bool) Outcome {
	d := &sp.Decision
	switch {
	case d.Action == rewrite.Refuse:
		return Outcome{Reply: d.Reply, Abort: d.Effect == rewrite.AbortMulti}
	case aborted:
		return Outcome{Reply: ReplyQueued}
	case t.N >= t.MaxQueued || int64(len(t.Buf)+len(f.Raw)) > t.MaxBytes:
		return Outcome{Reply: ReplyTooLarge, Abort: true}
	case !t.room(f):
		return Outcome{Reply: ReplyOverBudget, Abort: true, OverBudget: true}
	}
	if IsScriptLoad(f.Args) {
		// Only a forwarded one is queued: a verb body's, which the proxy
		// answers itself, is refused inside MULTI.
		t.Loads = append(t.Loads, Load{At: t.N, Raw: append([]byte(nil), f.Raw...)})
	}
	t.Buf = pipe.Encode(t.Buf, f, d)
	t.N++
	if t.Acking && !t.Writes {
		t.Writes = sp.IsWrite(f.Args)
	}
	t.Route.Note(sp) // package plan: its binding, queues and verb role
	return Outcome{Reply: ReplyQueued, Queued: true}
}

// room takes from the memory budget the bytes f adds to Buf past the free
// ones (a rewritten head is at most 64 bytes longer than the client's);
// false when the budget cannot give them.
func (t *Tx) room(f resp.Frame) bool {
	want := int64(len(t.Buf) + len(f.Raw) + 64 - FreeBytes)
	if want <= t.Held {
		return true
	}
	if !t.Mem.TryTake(want - t.Held) {
		return false
	}
	t.Held = want
	return true
}

// Hand gives Buf away to be sent as it is, not copied (pipe.OutRef): what
// it holds of the budget is Sent from now on, given back once the
// replies are written (Release).
func (t *Tx) Hand() []byte {
	buf := t.Buf
	t.Buf = nil
	t.Sent += t.Held
	t.Held = 0
	return buf
}

// Release returns what was sent at EXEC (all: and what is held), and no
// longer counts it: the caller gives it back to the budget with the
// output's bytes (package conn's ReleaseOutput and Release).
func (t *Tx) Release(all bool) int64 {
	n := t.Sent
	t.Sent = 0
	if all {
		n += t.Held
		t.Held = 0
	}
	return n
}

// Ran keeps of loads those EXEC's reply shows the server ran: its array's
// element for each is the script's sha. A transaction the server
// discarded (EXECABORT, a WATCH that failed: not an array) ran none.
func Ran(loads []Load, reply []byte) []Load {
	rep, _, err := fence.Decode(reply)
	if err != nil || rep.Type != '*' || rep.Null {
		return loads[:0]
	}
	kept := loads[:0]
	for _, l := range loads {
		if l.At < len(rep.Elems) && rep.Elems[l.At].Type == '$' && !rep.Elems[l.At].Null {
			kept = append(kept, l)
		}
	}
	return kept
}

// IsScriptLoad reports whether args is SCRIPT LOAD with its one argument.
func IsScriptLoad(args [][]byte) bool {
	return len(args) == 3 && rewrite.EqualFold(args[0], "SCRIPT") && rewrite.EqualFold(args[1], "LOAD")
}
