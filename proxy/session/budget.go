package session

import (
	"errors"
	"strconv"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/conn"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
)

// The process-wide memory budget (Options.MaxBuffered, limits.buffered_bytes).
//
// A client can make the proxy hold bytes for it beyond its connection's own
// small buffers: a command larger than the read buffer (held whole until
// it is framed, because a shared upstream connection carries whole
// commands only), a transaction's queued commands, replies not yet
// written, a subscriber's messages waiting for it. All of them take their
// bytes from one budget, so what the proxy holds is bounded whatever many
// clients do at once, and each is treated as its nature allows:
//
//   - Input waits (package conn's Conn.Room). A client whose command
//     needs more room than the budget has left is not read from until
//     other clients' bytes are released: its socket buffers fill and TCP
//     pushes back on it, while every other client is served. Waiting
//     clients get their room in the order they asked. A client that
//     already holds part of a command (one with several large arguments,
//     each asked for when its length is read) takes what it still needs at
//     once, past the budget if it must, one such client at a time: clients
//     that each hold part of a command could otherwise wait for each other
//     for good. So the bound is the budget plus one command.
//   - A command that needs more than the whole budget gets
//     `-ERR emqproxy: command too large for the proxy's memory budget ...`
//     and the client is closed (the rest of its bytes cannot be framed),
//     counted as client_rejected{reason="memory_budget"}. With the default
//     budget (128 MiB) that is the largest command the proxy takes, below
//     limits.max_bulk.
//   - A reply is never waited for: the shared connection must go on
//     reading for every client. A reply that does not fit in what the
//     budget has left is read and dropped, and the client gets
//     `-ERR emqproxy: reply dropped ...` in its place, which says that the
//     command ran. Its other replies are its own.
//   - A transaction's command that does not fit is refused and the
//     transaction is discarded at EXEC, as one over max_reply_bytes is.
//   - A subscriber whose waiting messages do not fit is closed (counted as
//     memory_budget), as the server closes a subscriber over its output
//     buffer limit.
//
// Not counted: each connection's own reusable buffers (up to 64 KiB to
// read, 16 KiB of each batch's replies, the reply and command buffers it
// keeps between batches, up to 256 KiB each), bounded by
// limits.max_clients;
// and the runtime's own overhead (garbage not yet collected), which is why
// the default leaves the shipped manifests' 512 Mi half free. The gauge
// emqproxy_buffered_bytes shows what is held now.

// The bytes of a batch's replies (and of a session's pending output) not
// taken from the budget are resp.FreeReplyBytes: the common small reply
// never touches it. A reply takes at least resp.ReplyGrant at a time.

// replyTooLargeForBudget is the reply to a command that needs more room
// than the whole budget.
func replyTooLargeForBudget(need int, limit int64) []byte {
	return []byte("-ERR emqproxy: command too large for the proxy's memory budget (it needs more than " +
		strconv.Itoa(need) + " bytes; limits.buffered_bytes is " + strconv.FormatInt(limit, 10) + ")\r\n")
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
	for _, b := range s.spare {
		mem.Give(b.Acct.Held)
		b.Acct.Held = 0
	}
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
