package proxy

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/emqproxy/emqproxy/rewrite"
)

// Writes confirmed by replicas (UpstreamOptions.AckReplicas).
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
// One WAIT per batch, not per command: WAIT confirms everything the
// connection wrote before it.
//
// While the replicas are short: the server serves a connection's commands
// in order, so a WAIT that runs out its timeout holds up every batch
// written after it on that connection, and with replicas gone each batch
// would wait for all the WAITs ahead of it. So once a WAIT confirms fewer
// than N, the upstream is short: one batch at a time carries WAIT with the
// full timeout (the probe), every other write batch `WAIT N 1` (a
// millisecond: confirmed if the replicas have it already, else the error
// at once). The first WAIT that confirms ends it; a switch of a Sentinel
// upstream's primary starts it (the new primary's replicas are unknown).
// While short, a command waits at most about two AckTimeouts for its
// replicas (the probe ahead of it, and its own), however many clients
// write. The batches already sent when the replicas went away each wait
// out their own WAIT, one after the other on their connection: at most
// one per batch then in flight. A write is a rewritten verb (EMQ.<VERB>), a
// verb call passed as EVALSHA to a scripts node, a script call that is not
// a declared read (EVAL_RO, EVALSHA_RO), a command the server's table
// flags write, and EXEC of a transaction that queued one. On a shared
// connection the WAIT also holds up, on the server, the batches of other
// clients written after it (the server serves a connection's commands in
// order): that, and the round trip to a replica, is the cost measured in
// bench ("ack_replicas 1"). A command a subscribed RESP3 client sends on
// its own connection (subscribe.go) is not confirmed.
//
// With AckReplicas 0 none of this runs: the session checks one nil
// pointer per forwarded command, and one flag per segment.

// ackSpec is how an upstream's writes are confirmed.
type ackSpec struct {
	name    string
	n       int64
	timeout time.Duration
	full    []byte // WAIT n timeout-ms, encoded
	quick   []byte // WAIT n 1, while short

	short   atomic.Bool // the last WAIT confirmed fewer than n
	probing atomic.Bool // a batch with the full timeout is out while short
}

// How a batch's WAIT waits (batch.wait).
const (
	waitNone  uint8 = iota
	waitFull        // the full timeout
	waitProbe       // the full timeout, as the probe while short
	waitQuick       // a millisecond, while short
)

// newAckSpec returns the upstream's ackSpec, or nil when it does not ask
// for replicas.
func newAckSpec(o UpstreamOptions) *ackSpec {
	if o.AckReplicas <= 0 {
		return nil
	}
	ms := max(o.AckTimeout.Milliseconds(), 1)
	return &ackSpec{name: o.Name, n: int64(o.AckReplicas), timeout: time.Duration(ms) * time.Millisecond,
		full: waitCommand(o.AckReplicas, ms), quick: waitCommand(o.AckReplicas, 1)}
}

// waitCommand encodes WAIT n ms.
func waitCommand(n int, ms int64) []byte {
	b := redcon.AppendArray(nil, 3)
	b = redcon.AppendBulkString(b, "WAIT")
	b = redcon.AppendBulkString(b, strconv.Itoa(n))
	return redcon.AppendBulkString(b, strconv.FormatInt(ms, 10))
}

// noteWrite records the command about to be added to b (as reply b.n)
// as a write when it is one.
func (s *session) noteWrite(b *batch, args [][]byte, d *rewrite.Decision) {
	if s.isWrite(args, d) {
		b.writes = append(b.writes, b.n)
	}
}

// isWrite reports whether a forwarded command writes (see above).
func (s *session) isWrite(args [][]byte, d *rewrite.Decision) bool {
	if isScriptCall(args[0]) {
		if d.Script != nil {
			return d.Script.Verb != ""
		}
		ro := foldEq(args[0], "EVALSHA_RO") || foldEq(args[0], "EVAL_RO") || d.Head == "EVALSHA_RO" || d.Head == "EVAL_RO"
		return !ro
	}
	ck := s.srv.keys.lookup(args)
	return ck != nil && ck.traits&tWrite != 0
}

// appendWait ends b with WAIT when it holds a write.
func (a *ackSpec) appendWait(b *batch) {
	if len(b.writes) == 0 || b.wait != waitNone {
		return
	}
	b.wait = waitFull
	if a.short.Load() {
		b.wait = waitQuick
		if a.probing.CompareAndSwap(false, true) {
			b.wait = waitProbe
		}
	}
	if b.wait == waitQuick {
		b.out = append(b.out, a.quick...)
	} else {
		b.out = append(b.out, a.full...)
	}
	b.n++
}

// settleAcks takes WAIT's reply out of every batch of the segment that
// ends with one, and answers its writes as WAIT says (see above).
func (s *session) settleAcks() {
	for i := range s.parts {
		pt := &s.parts[i]
		if pt.b.wait != waitNone && pt.up.ack != nil {
			if n := pt.up.ack.settle(pt.b); n > 0 {
				s.srv.met.unacked.WithLabelValues(pt.up.name).Add(float64(n))
			}
		}
	}
}

// settle removes WAIT's reply, the batch's last, and replaces the writes'
// replies when it does not confirm them. It returns how many were
// replaced.
func (a *ackSpec) settle(b *batch) int {
	w := b.n - 1
	reply := b.reply(w)
	got, answered := waitCount(reply)
	confirmed := answered && got >= a.n
	kind := b.wait
	b.replies = b.replies[:b.ends[w]-len(reply)]
	b.ends = b.ends[:w]
	b.n, b.wait = w, waitNone
	if kind == waitProbe {
		a.probing.Store(false)
	}
	if answered {
		a.short.Store(!confirmed)
	}
	if confirmed || b.over {
		return 0
	}
	timeout := a.timeout
	if kind == waitQuick {
		timeout = time.Millisecond
	}
	msg := a.unconfirmed(got, reply, timeout)
	out := make([]byte, 0, len(b.replies)+len(b.writes)*len(msg))
	replaced, k, start := 0, 0, 0
	for i := range b.n {
		r := b.replies[start:b.ends[i]]
		start = b.ends[i]
		for k < len(b.writes) && b.writes[k] < i {
			k++
		}
		if k < len(b.writes) && b.writes[k] == i && !isErrorReply(r) {
			r = msg
			replaced++
		}
		out = append(out, r...)
		b.ends[i] = len(out)
	}
	b.replies = out
	return replaced
}

// waitCount reads WAIT's integer reply.
func waitCount(r []byte) (int64, bool) {
	if len(r) < 4 || r[0] != ':' {
		return 0, false
	}
	return rewrite.ParseInt(r[1 : len(r)-2])
}

// isErrorReply reports whether r is an error reply (RESP2 or a RESP3
// blob error).
func isErrorReply(r []byte) bool { return len(r) > 0 && (r[0] == '-' || r[0] == '!') }

// unconfirmed is the error a write gets in place of its reply when WAIT
// (whose reply is wait), waiting timeout, confirmed only got replicas.
func (a *ackSpec) unconfirmed(got int64, wait []byte, timeout time.Duration) []byte {
	why := "WAIT answered " + strconv.FormatInt(got, 10)
	if _, ok := waitCount(wait); !ok {
		why = "WAIT: " + string(firstLine(wait))
	}
	return []byte("-UPSTREAM " + a.name + " write not confirmed by " + strconv.FormatInt(a.n, 10) +
		" replicas within " + timeout.String() + " (" + oneLine(why) + "); the command may have been applied\r\n")
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
