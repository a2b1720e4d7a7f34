package upstream

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/resp"
)

// Writes confirmed by replicas (Options.AckReplicas).
//
// Replication is asynchronous: a write the primary answered but had not
// sent to a replica is gone when that replica is promoted. With
// AckReplicas N, a batch that holds a write gets `WAIT N <AckTimeout ms>`
// appended after its last command, on the same connection; the proxy reads
// WAIT's reply itself (the client never sees it) and:
//
//   - when it is an integer of at least N, every reply goes to the client
//     as the server sent it;
//   - otherwise (fewer replicas acknowledged in time, or WAIT failed) every
//     write of the batch whose reply is not an error gets, instead of its
//     reply, `-UPSTREAM <name> write not confirmed by N replicas ...; the
//     command may have been applied`: the primary did apply it, but it may
//     not survive a failover, and the client must treat it as an unknown
//     outcome. A write answered with an error keeps the server's error
//     (the server reports what it did not do; a command that never left
//     keeps the unavailable error, one lost in flight the lost error).
//
// One WAIT per write to the node, not per command nor per client batch:
// WAIT confirms everything the connection wrote before it. Each batch that
// holds a write is readied with its WAIT; when the shared connection's
// writer sends several batches in one write, only the last of them keeps
// its WAIT, and the others ride on it (package pipe's oneWait): their replies are
// complete only once that WAIT's reply is read, and each gets a copy of it
// as its own last reply, so settling it is the same as for a batch that
// sent its own. A rider lost in flight gets the lost error for its WAIT
// too, and its writes the not-confirmed error. A write is a rewritten verb (EMQ.<VERB>), a
// verb call passed as EVALSHA to a scripts node, a script call that is not
// a declared read (EVAL_RO, EVALSHA_RO), a command the server's table
// flags write, and EXEC of a transaction that queued one. While WAIT
// confirms, each costs a round trip between the primary and its replicas,
// during which it holds up the batches written after it on its connection
// (measured in bench, "ack_replicas 1"): one round trip a write of many
// clients' batches, rather than one a batch. And while one WAIT is in
// flight on a connection, the write batches sent meanwhile are held in the
// proxy and leave together, with one WAIT, when it is answered (package
// pipe's read.go, "held"): written at once, each would have waited behind
// it in the server and then cost a round trip of its own. The commands of
// a RESP3 client the proxy bridges (package session's bridge.go) and of a
// client in RESP2 subscribe mode go on its own connections and are not
// confirmed.
//
// While the replicas are short: the server serves a connection's commands
// in order, so a WAIT that runs out its timeout holds up every command
// written after it on that connection, and with a replica gone each batch
// would wait for all the WAITs ahead of it. (A WAIT with a short timeout is
// no way out: the server notices a blocked client's timeout only at its
// next cron tick, 50 to 100 ms later at hz 10.) So once a WAIT confirms
// fewer than N, the upstream is short: a write batch on a shared RESP2
// connection is sent, one at a time, on a connection of its own (the
// probe connection) with the full WAIT, and every other write batch on a
// shared connection is sent without WAIT and its writes answered with the
// not-confirmed error at once (`... (replicas short: ...) ...`). The first
// WAIT that confirms ends it; a switch of a Sentinel upstream's primary
// starts it (the new primary's replicas are unknown). Reads and the other
// clients' commands are then never held up by a WAIT, and a write waits at
// most AckTimeout. A client's own connection (WATCH, blocking commands)
// keeps its full WAIT: it holds up nobody else. The batches already sent
// or held when the replicas went away wait out at most two WAITs on their
// connection: the one in flight, and the one the held batches share.
//
// Reads are not held up by a WAIT either: the server would serve a read
// written behind a WAIT only once the WAIT is answered, so a batch with no
// write bound for a shared RESP2 connection on which a WAIT is in flight
// goes on a connection of its own instead (the reads' connection: one an
// upstream, opened with its shared ones; while it is down, the read waits
// behind the WAIT as before). A session sends its next batch only once
// the last one is answered, so its own writes are applied before its
// reads, on whichever connection; between clients there was never an
// order to keep.
//
// With AckReplicas 0 none of this runs: the session checks one nil
// pointer per forwarded command, and one flag per segment.

// ackSpec is how an upstream's writes are confirmed.
type ackSpec struct {
	name    string
	n       int64
	timeout time.Duration
	cmd     []byte // WAIT n timeout-ms, encoded

	short   atomic.Bool            // the last WAIT confirmed fewer than n
	why     atomic.Pointer[string] // what made it short: the last WAIT that did not confirm, or a switch
	probing atomic.Bool            // a batch is out on the probe connection

	once sync.Once
	slot atomic.Pointer[slot] // the probe connection, opened when first short

	reads *slot // the reads' connection (startReads)
}

// How a batch waits for the replicas (pipe.Batch.Ack).
const (
	waitNone  uint8 = iota
	waitFull        // WAIT at its end, on its own connection
	waitProbe       // WAIT at its end, on the probe connection, while short
	waitShort       // no WAIT: short, its writes are not confirmed
)

// newAckSpec returns the upstream's ackSpec, or nil when it does not ask
// for replicas.
func newAckSpec(o Options) *ackSpec {
	if o.AckReplicas <= 0 {
		return nil
	}
	ms := max(o.AckTimeout.Milliseconds(), 1)
	a := &ackSpec{name: o.Name, n: int64(o.AckReplicas), timeout: time.Duration(ms) * time.Millisecond}
	a.cmd = resp.AppendArray(nil, 3)
	a.cmd = resp.AppendBulkString(a.cmd, "WAIT")
	a.cmd = resp.AppendBulkString(a.cmd, strconv.Itoa(o.AckReplicas))
	a.cmd = resp.AppendBulkString(a.cmd, strconv.FormatInt(ms, 10))
	return a
}

// AckBatch readies a batch bound for p (a shared connection in protocol
// proto, or the client's own when dedicated) to wait for the replicas
// when it holds a write, and returns the connection to send it on: p, or
// the probe connection while short (see above).
func (u *Upstream) AckBatch(b *pipe.Batch, p *pipe.Pipe, proto int, dedicated bool) *pipe.Pipe {
	a := u.ack
	if b.Ack != waitNone {
		return p
	}
	if len(b.Writes) == 0 {
		if !dedicated && proto == 2 && p.Waiting() {
			if rp := u.readsPipe(); rp != nil && u.Serves(rp) {
				return rp
			}
		}
		return p
	}
	if a.short.Load() && !dedicated {
		b.Ack = waitShort
		if proto != 2 || !a.probing.CompareAndSwap(false, true) {
			return p
		}
		pp := u.probePipe()
		if pp == nil {
			a.probing.Store(false)
			return p
		}
		b.Ack, p = waitProbe, pp
	} else {
		b.Ack = waitFull
		b.WaitLen = len(a.cmd)
	}
	b.Out = append(b.Out, a.cmd...)
	b.N++
	return p
}

// probePipe returns the probe connection, opening it on first use (nil
// until it is up).
func (u *Upstream) probePipe() *pipe.Pipe {
	a := u.ack
	a.once.Do(func() {
		if u.ctx.Err() != nil {
			return
		}
		s := newSlot()
		a.slot.Store(s)
		u.wg.Add(1)
		go u.keep(s, 2)
	})
	if s := a.slot.Load(); s != nil {
		return s.cur.Load()
	}
	return nil
}

// startReads starts the reads' connection, with the upstream's shared
// ones: a read that meets a WAIT finds it up.
func (u *Upstream) startReads() {
	u.ack.reads = newSlot()
	u.wg.Add(1)
	go u.keep(u.ack.reads, 2)
}

// readsPipe returns the reads' connection (nil while it is down).
func (u *Upstream) readsPipe() *pipe.Pipe { return u.ack.reads.cur.Load() }

// Settle takes WAIT's reply out of b when it ends with one and answers
// its writes as WAIT says (see above); it returns how many writes got the
// not-confirmed error.
func (u *Upstream) Settle(b *pipe.Batch) int {
	if b.Ack == waitNone || u.ack == nil {
		return 0
	}
	return u.ack.settle(b)
}

// settle removes WAIT's reply, the batch's last, and replaces the writes'
// replies when it does not confirm them (or, short, when no WAIT was
// sent). It returns how many were replaced.
func (a *ackSpec) settle(b *pipe.Batch) int {
	kind := b.Ack
	b.Ack = waitNone
	var msg []byte
	if kind == waitShort {
		msg = a.shortError()
	} else {
		w := b.N - 1
		reply := b.Reply(w)
		got, answered := waitCount(reply)
		confirmed := answered && got >= a.n
		b.Replies = b.Replies[:b.Ends[w]-len(reply)]
		b.Ends = b.Ends[:w]
		b.N = w
		if kind == waitProbe {
			a.probing.Store(false)
		}
		if answered {
			if !confirmed {
				a.setShort("the last WAIT answered " + strconv.FormatInt(got, 10))
			} else {
				a.short.Store(false)
			}
		}
		if confirmed {
			return 0
		}
		msg = a.unconfirmed(got, reply)
	}
	if b.Over {
		return 0
	}
	out := make([]byte, 0, len(b.Replies)+len(b.Writes)*len(msg))
	replaced, k, start := 0, 0, 0
	for i := range b.N {
		r := b.Replies[start:b.Ends[i]]
		start = b.Ends[i]
		for k < len(b.Writes) && b.Writes[k] < i {
			k++
		}
		if k < len(b.Writes) && b.Writes[k] == i && !isErrorReply(r) {
			r = msg
			replaced++
		}
		out = append(out, r...)
		b.Ends[i] = len(out)
	}
	b.Replies = out
	return replaced
}

// waitCount reads WAIT's integer reply.
func waitCount(r []byte) (int64, bool) {
	if len(r) < 4 || r[0] != ':' {
		return 0, false
	}
	return resp.ParseInt(r[1 : len(r)-2])
}

// isErrorReply reports whether r is an error reply (RESP2 or a RESP3
// blob error).
func isErrorReply(r []byte) bool { return len(r) > 0 && (r[0] == '-' || r[0] == '!') }

// unconfirmed is the error a write gets in place of its reply when WAIT
// (whose reply is wait) confirmed only got replicas.
func (a *ackSpec) unconfirmed(got int64, wait []byte) []byte {
	why := "WAIT answered " + strconv.FormatInt(got, 10)
	if _, ok := waitCount(wait); !ok {
		why = "WAIT: " + string(firstLine(wait))
	}
	return clienterr.Reply(clienterr.New(clienterr.Upstream, a.name+" write not confirmed by "+strconv.FormatInt(a.n, 10)+
		" replicas within "+a.timeout.String()+" ("+why+"); the command may have been applied"))
}

// setShort makes the upstream short, for why (what a write's error then
// says). The reason stays when a WAIT confirms: a batch found short before
// that is answered with what made it short.
func (a *ackSpec) setShort(why string) {
	a.why.Store(&why)
	a.short.Store(true)
}

// shortError is the error a write gets while the replicas are short and
// its batch was sent without WAIT.
func (a *ackSpec) shortError() []byte {
	why := "not confirmed yet"
	if w := a.why.Load(); w != nil {
		why = *w
	}
	return clienterr.Reply(clienterr.New(clienterr.Upstream, a.name+" write not confirmed by "+strconv.FormatInt(a.n, 10)+
		" replicas (replicas short: "+why+
		"; writes wait for them again once one confirms); the command may have been applied"))
}

// firstLine is r's first line without its type byte and its CRLF, cut to
// 200 bytes.
func firstLine(r []byte) []byte {
	if len(r) > 0 {
		r = r[1:]
	}
	for i, c := range r {
		if c == '\r' || c == '\n' {
			r = r[:i]
			break
		}
	}
	return r[:min(len(r), 200)]
}
