package session

import (
	"bytes"
	"strconv"
	"time"

	"github.com/tidwall/redcon"

	"github.com/emqproxy/emqproxy/proxy/upstream"
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

// blockConn is a session's connection for blocking commands: its upstream
// and its id on the server (0: unknown).
type blockConn struct {
	up *upstream.Upstream
	id int64
}

// sessionByID returns the live session with id, or nil.
func (s *session) sessionByID(id int64) *session {
	if id <= 0 {
		return nil
	}
	return s.srv.Sessions.byID(uint64(id))
}

// clientUnblock answers CLIENT UNBLOCK (see above).
func (s *session) clientUnblock(t *rewrite.ClientTarget) []byte {
	zero := []byte(":0\r\n")
	sess := s.sessionByID(t.ID)
	if sess == nil || sess == s || !sess.listing.blocked.Load() {
		return zero
	}
	bc := sess.listing.blockOn.Load()
	if bc == nil || bc.id == 0 {
		return zero
	}
	gen := sess.listing.blockGen.Load()
	for try := 0; ; try++ {
		r := unblockOn(s, bc, t.Error)
		// The session is flagged blocked once its command is sent; the
		// server may not have read it yet. While the same command is
		// still awaited, ask again, a little while.
		if !bytes.Equal(r, zero) || try == unblockTries-1 ||
			!sess.listing.blocked.Load() || sess.listing.blockGen.Load() != gen {
			return r
		}
		time.Sleep(time.Millisecond)
	}
}

// unblockTries bounds the CLIENT UNBLOCKs sent for one (see clientUnblock).
const unblockTries = 20

// unblockOn sends CLIENT UNBLOCK of bc on its upstream's shared connection
// (one reply; it changes nothing of the connection) and returns the reply.
func unblockOn(s *session, bc *blockConn, withError bool) []byte {
	p := bc.up.Shared(s.id, 2)
	if p == nil {
		return bc.up.Unavailable()
	}
	b := upstream.NewBatch()
	n := 3
	if withError {
		n = 4
	}
	b.Out = redcon.AppendArray(b.Out, n)
	b.Out = redcon.AppendBulkString(b.Out, "CLIENT")
	b.Out = redcon.AppendBulkString(b.Out, "UNBLOCK")
	b.Out = redcon.AppendBulkString(b.Out, strconv.FormatInt(bc.id, 10))
	if withError {
		b.Out = redcon.AppendBulkString(b.Out, "ERROR")
	}
	b.N, b.Max = 1, 1<<16
	if err := p.Send(b); err != nil {
		return bc.up.Unavailable()
	}
	p.Await(b)
	return b.Reply(0)
}

// clientKill answers CLIENT KILL ID (see above).
func (s *session) clientKill(t *rewrite.ClientTarget) []byte {
	var victims []*session
	self := false
	s.srv.Sessions.mu.Lock()
	for sess := range s.srv.Sessions.m {
		switch {
		case t.ID != 0 && int64(sess.id) != t.ID:
		case sess == s:
			self = !t.SkipMe
		default:
			// Gone from CLIENT LIST at once, as on the server; its
			// goroutine ends once it finds the connection closed.
			delete(s.srv.Sessions.m, sess)
			victims = append(victims, sess)
		}
	}
	s.srv.Sessions.mu.Unlock()
	for _, v := range victims {
		_ = v.nc.Close()
	}
	n := len(victims)
	if self {
		n++
		s.closing = true
	}
	return redcon.AppendInt(nil, int64(n))
}
