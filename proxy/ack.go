package proxy

import (
	"strconv"
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
// connection wrote before it. A write is a rewritten verb (EMQ.<VERB>), a
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
	cmd     []byte // WAIT n timeout-ms, encoded
}

// newAckSpec returns the upstream's ackSpec, or nil when it does not ask
// for replicas.
func newAckSpec(o UpstreamOptions) *ackSpec {
	if o.AckReplicas <= 0 {
		return nil
	}
	ms := max(o.AckTimeout.Milliseconds(), 1)
	a := &ackSpec{name: o.Name, n: int64(o.AckReplicas), timeout: time.Duration(ms) * time.Millisecond}
	a.cmd = redcon.AppendArray(nil, 3)
	a.cmd = redcon.AppendBulkString(a.cmd, "WAIT")
	a.cmd = redcon.AppendBulkString(a.cmd, strconv.Itoa(o.AckReplicas))
	a.cmd = redcon.AppendBulkString(a.cmd, strconv.FormatInt(ms, 10))
	return a
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
	if d.Action == rewrite.Rewrite && d.Script != nil && d.Script.Verb != "" {
		return true
	}
	ck := s.srv.keys.lookup(args)
	return ck != nil && ck.traits&tWrite != 0
}

// appendWait ends b with WAIT when it holds a write.
func (a *ackSpec) appendWait(b *batch) {
	if len(b.writes) == 0 || b.wait {
		return
	}
	b.out = append(b.out, a.cmd...)
	b.n++
	b.wait = true
}

// settleAcks takes WAIT's reply out of every batch of the segment that
// ends with one, and answers its writes as WAIT says (see above).
func (s *session) settleAcks() {
	for i := range s.parts {
		pt := &s.parts[i]
		if pt.b.wait && pt.up.ack != nil {
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
	got, confirmed := waitCount(reply)
	confirmed = confirmed && got >= a.n
	b.replies = b.replies[:b.ends[w]-len(reply)]
	b.ends = b.ends[:w]
	b.n, b.wait = w, false
	if confirmed || b.over {
		return 0
	}
	msg := a.unconfirmed(got, reply)
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
// (whose reply is wait) confirmed only got replicas.
func (a *ackSpec) unconfirmed(got int64, wait []byte) []byte {
	why := "WAIT answered " + strconv.FormatInt(got, 10)
	if _, ok := waitCount(wait); !ok {
		why = "WAIT: " + string(firstLine(wait))
	}
	return []byte("-UPSTREAM " + a.name + " write not confirmed by " + strconv.FormatInt(a.n, 10) +
		" replicas within " + a.timeout.String() + " (" + oneLine(why) + "); the command may have been applied\r\n")
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
