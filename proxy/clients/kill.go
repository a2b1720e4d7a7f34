package clients

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// CLIENT UNBLOCK and CLIENT KILL ID, where policy.allow opens them.
//
// The ids a client knows are the proxy's sessions' (CLIENT ID, HELLO,
// CLIENT LIST), which no server knows: forwarded, these commands would
// name some connection of the server's, or none. The proxy answers them
// for its own sessions, as the server answers for its clients:
//
//   - CLIENT UNBLOCK <id> [TIMEOUT|ERROR] of a session waiting on a
//     blocking command sends CLIENT UNBLOCK, with the server's id of the
//     connection that command waits on (asked with CLIENT ID when that
//     connection opened: upstream/owned.go's blockingPipe) and the client's reason,
//     on the upstream's shared connection, and answers the server's reply:
//     :1 once the command was unblocked (its client gets the server's
//     timeout reply, or -UNBLOCKED), :0 when it was not waiting any more.
//     An id of no session, or of one not blocked, is :0. A session is
//     flagged blocked (CLIENT LIST's b) once its command is sent, which
//     the server may not have read yet: a :0 while that command is still
//     awaited is asked again, for up to 20 ms.
//   - CLIENT KILL ID <id> [SKIPME yes|no] (ID and SKIPME filters only; no
//     ID: every session) closes the sessions it names and answers how
//     many. The caller's own session counts only under SKIPME no, as on
//     the server, and then closes after the reply.

// BlockConn is a session's connection for blocking commands: its upstream
// and its id on the server (0: unknown).
type BlockConn struct {
	Up *upstream.Upstream
	ID int64
}

// Unblock answers CLIENT UNBLOCK (t) for self (see above).
func (r *Registry[C]) Unblock(self C, t *rewrite.ClientTarget, tr upstream.Transport) []byte {
	zero := []byte(":0\r\n")
	if t.ID <= 0 {
		return zero
	}
	c, ok := r.byID(uint64(t.ID))
	if !ok || c == self {
		return zero
	}
	v := c.View()
	if !v.Blocked.Load() {
		return zero
	}
	bc := v.BlockOn.Load()
	if bc == nil || bc.ID == 0 {
		return zero
	}
	gen := v.BlockGen.Load()
	for try := 0; ; try++ {
		rep := unblockOn(tr, self.ID(), bc, t.Error)
		// The session is flagged blocked once its command is sent; the
		// server may not have read it yet. While the same command is
		// still awaited, ask again, a little while.
		if !bytes.Equal(rep, zero) || try == unblockTries-1 ||
			!v.Blocked.Load() || v.BlockGen.Load() != gen {
			return rep
		}
		time.Sleep(time.Millisecond)
	}
}

// unblockTries bounds the CLIENT UNBLOCKs sent for one (see Unblock).
const unblockTries = 20

// unblockOn sends CLIENT UNBLOCK of bc on its upstream's shared connection
// (one reply; it changes nothing of the connection), given by tr, as
// session caller's command, and returns the reply.
func unblockOn(tr upstream.Transport, caller uint64, bc *BlockConn, withError bool) []byte {
	// The shared kind never waits: no deadline to give it.
	p := upstream.SharedVia(context.Background(), tr, bc.Up, caller, 2)
	if p == nil {
		return bc.Up.Unavailable()
	}
	b := pipe.NewBatch()
	n := 3
	if withError {
		n = 4
	}
	b.Out = resp.AppendArray(b.Out, n)
	b.Out = resp.AppendBulkString(b.Out, "CLIENT")
	b.Out = resp.AppendBulkString(b.Out, "UNBLOCK")
	b.Out = resp.AppendBulkString(b.Out, strconv.FormatInt(bc.ID, 10))
	if withError {
		b.Out = resp.AppendBulkString(b.Out, "ERROR")
	}
	b.N, b.Max = 1, 1<<16
	if err := p.Send(b); err != nil {
		return bc.Up.Unavailable()
	}
	p.Await(b)
	return b.Reply(0)
}

// Kill answers CLIENT KILL ID (t) for self (see above): it closes the
// other sessions named, and reports whether self is named too, to close
// after the reply.
func (r *Registry[C]) Kill(self C, t *rewrite.ClientTarget) (reply []byte, closeSelf bool) {
	var victims []C
	r.mu.Lock()
	for id, c := range r.m {
		switch {
		case t.ID != 0 && int64(id) != t.ID:
		case c == self:
			closeSelf = !t.SkipMe
		default:
			// Gone from CLIENT LIST at once, as on the server; its
			// goroutine ends once it finds the connection closed.
			delete(r.m, id)
			victims = append(victims, c)
		}
	}
	r.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
	n := len(victims)
	if closeSelf {
		n++
	}
	return resp.AppendInt(nil, int64(n)), closeSelf
}
