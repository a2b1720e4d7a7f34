package session

import (
	"errors"
	"strconv"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/conn"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
)

// The process-wide memory budget (limits.Budget; Options.MaxBuffered,
// limits.buffered_bytes), as docs/reliability.md ("Bounded memory") tells
// operators: a client's input waits for room (package conn's Conn.Room),
// unread, while every other client is served; a command larger than the
// whole budget is answered with an error and the client closed (tooLarge);
// a reply is never waited for: one that does not fit is dropped and
// answered with an error in its place (package resp's Account, counted
// here: releaseReplies); a transaction's command that does not fit is
// refused (package txn); a subscriber whose messages do not fit is closed
// (package pubsub). Each connection's own reusable buffers are not
// counted (bounded by limits.max_clients), nor is the runtime's garbage
// not yet collected, which is why the default leaves the shipped
// manifests' 512 Mi half free.

// replyTooLargeForBudget is the reply to a command that needs more room
// than the whole budget.
func replyTooLargeForBudget(need int, limit int64) []byte {
	return clienterr.Reply(clienterr.New(clienterr.Proxy, "command too large for the proxy's memory budget (it needs more than "+
		strconv.Itoa(need)+" bytes; limits.buffered_bytes is "+strconv.FormatInt(limit, 10)+")"))
}

// room makes room in the client's read buffer for more bytes (package
// conn's Conn.Room), waiting for the budget as a holder while a
// transaction's queued commands hold some of it. An error ends the session:
// a command over the query buffer limit, a command larger than the whole
// budget (its error is written first), or the server shutting down.
func (s *session) room() error {
	if err := s.c.Room(s.tx.Held > 0); err != nil {
		return s.roomRefused(err)
	}
	return nil
}

// roomRefused acts on why the client's input got no room (a function of
// its own: the targets of errors.As escape, and room runs before every
// read).
func (s *session) roomRefused(err error) error {
	var qb *conn.QueryBufferError
	var big *conn.TooLargeError
	switch {
	case errors.As(err, &qb):
		s.srv.Met.Rejected.WithLabelValues("query_buffer").Inc()
		s.log.Warn("closing client over the query buffer limit", zap.Int("bytes", qb.Bytes))
		return errClose
	case errors.As(err, &big):
		s.tooLarge(big.Need, big.Budget)
		return errClose
	}
	return ErrServerClosed // the budget is closed only when the server shuts down
}

// tooLarge answers a command that needs more room than the whole budget,
// and closes the client: the rest of its bytes cannot be framed.
func (s *session) tooLarge(need int, limit int64) {
	s.srv.Met.Rejected.WithLabelValues(pubsub.ReasonMemoryBudget).Inc()
	s.log.Warn("closing a client whose command is larger than the memory budget", zap.Int("need", need), zap.Int64("budget", limit))
	reply := replyTooLargeForBudget(need, limit)
	var err error
	if s.sub != nil {
		// Subscribe mode: after every message relayed so far.
		err = s.sub.FinishWith(new([]byte), reply)
	} else {
		err = s.c.WriteError(reply)
	}
	if err == nil {
		s.c.Linger()
	}
}

// releaseMemory gives back everything the session holds (it ends).
func (s *session) releaseMemory() {
	mem := s.srv.Mem
	s.c.Release(s.tx.Release(true))
	s.seg.Release() // its spare batches
	mem.Done(s.id)
}

// releaseOutput gives back the output's bytes once they are written, and
// a transaction's sent at EXEC.
func (s *session) releaseOutput() {
	s.c.ReleaseOutput(s.tx.Release(false))
}

// releaseReplies gives back what a batch's replies hold of the budget
// (they were moved to the output) and counts those it dropped.
func (s *session) releaseReplies(b *pipe.Batch) {
	s.srv.Mem.Give(b.Acct.Held)
	b.Acct.Held = 0
	if b.Acct.Dropped > 0 {
		s.srv.Met.Refusals.WithLabelValues(pubsub.ReasonMemoryBudget).Add(float64(b.Acct.Dropped))
		s.log.Warn("replies dropped: the memory budget is in use", zap.Int("replies", b.Acct.Dropped), zap.Int64("budget", s.srv.Mem.Limit()))
		b.Acct.Dropped = 0
	}
}
