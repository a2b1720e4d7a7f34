package session

import (
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/deadline"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/resp"
)

// memHeld is what a session holds of the memory budget.
type memHeld struct {
	inHeld   int64 // bytes of the read buffer
	outHeld  int64 // bytes of the replies ready to write
	sentHeld int64 // a transaction's, sent at EXEC, until its replies are written
}

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
//   - Input waits. A client whose command needs more room than the budget
//     has left is not read from until other clients' bytes are released:
//     its socket buffers fill and TCP pushes back on it, while every other
//     client is served. Waiting clients get their room in the order they
//     asked. A client that already holds part of a command (one with
//     several large arguments, each asked for when its length is read)
//     takes what it still needs at once, past the budget if it must, one
//     such client at a time: clients that each hold part of a command
//     could otherwise wait for each other for good. So the bound is the
//     budget plus one command.
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

// replyTxOverBudget refuses a transaction's command that did not fit.
var replyTxOverBudget = []byte("-ERR emqproxy: the proxy's memory budget (limits.buffered_bytes) is in use by other clients; the transaction will be discarded at EXEC\r\n")

// resizeInput replaces the session's read buffer by one of size bytes
// holding its unread bytes, taking the bytes past keptReadBuf from the
// budget first (and releasing the old buffer's after). wait: a command
// needs the room, and the session waits for it (as a holder when it holds
// part of a command or a transaction's queued commands: it must not wait
// for room it holds itself); otherwise (a buffer grown to read a pipeline
// in one go) it is not grown when the budget is short.
// An error ends the session: a command larger than the whole budget (its
// error is written first), or the server shutting down.
func (s *session) resizeInput(size int, wait bool) (grown bool, err error) {
	mem := s.srv.Mem
	charge := int64(max(size-keptReadBuf, 0))
	if charge > mem.Limit() {
		s.srv.Met.Rejected.WithLabelValues(pubsub.ReasonMemoryBudget).Inc()
		s.log.Warn("closing a client whose command is larger than the memory budget", zap.Int("need", size), zap.Int64("budget", mem.Limit()))
		reply := replyTooLargeForBudget(size, mem.Limit())
		var err error
		if s.sub != nil {
			// Subscribe mode: after every message relayed so far.
			err = s.sub.FinishWith(new([]byte), reply)
		} else {
			s.wdl = deadline.Refresh(s.nc.SetWriteDeadline, s.wdl, s.srv.Cfg.WriteTimeout)
			_, err = s.nc.Write(reply)
		}
		if err == nil {
			s.lingerClose()
		}
		return false, errClose
	}
	if charge > 0 {
		if !wait {
			if !mem.TryTake(charge) {
				return false, nil
			}
		} else if err := mem.Take(s.id, charge, s.inHeld > 0 || s.tx.held > 0); err != nil {
			return false, ErrServerClosed // the budget is closed only when the server shuts down
		}
	}
	s.fr.Reset() // the last round's frames point into the old buffer
	nb := make([]byte, size)
	s.end = copy(nb, s.buf[s.start:s.end])
	s.start = 0
	s.buf = nb
	mem.Give(s.inHeld)
	s.inHeld = charge
	if charge == 0 {
		mem.Done(s.id)
	}
	return true, nil
}

// lingerTimeout is how long a client being closed after an error may go
// on sending the command the error refused (lingerClose).
const lingerTimeout = 2 * time.Second

// lingerClose ends the session's side of the connection after an error
// was written and reads what the client still sends, for at most
// lingerTimeout, dropping it: closing with unread input would reset the
// connection, and the client might never read the error.
func (s *session) lingerClose() {
	cw, ok := s.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = s.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
	for {
		if _, err := s.nc.Read(s.buf); err != nil {
			return
		}
	}
}

// releaseMemory gives back everything the session holds (it ends).
func (s *session) releaseMemory() {
	mem := s.srv.Mem
	mem.Give(s.inHeld + s.outHeld + s.sentHeld + s.tx.held)
	s.inHeld, s.outHeld, s.sentHeld, s.tx.held = 0, 0, 0, 0
	for _, b := range s.spare {
		mem.Give(b.Acct.Held)
		b.Acct.Held = 0
	}
	mem.Done(s.id)
}

// holdOutput takes from the budget the bytes of s.out past the free ones
// (replies copied there from their batches, whose bytes are released
// right after), without waiting: they are already read.
func (s *session) holdOutput() {
	if want := int64(len(s.out) - resp.FreeReplyBytes); want > s.outHeld {
		s.srv.Mem.Force(want - s.outHeld)
		s.outHeld = want
	}
}

// releaseOutput gives back s.out's bytes once they are written, and a
// transaction's sent at EXEC.
func (s *session) releaseOutput() {
	s.srv.Mem.Give(s.outHeld + s.sentHeld)
	s.outHeld, s.sentHeld = 0, 0
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
