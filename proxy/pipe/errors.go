package pipe

import (
	"errors"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/resp"
)

// The failures of a Pipe (package upstream exports them as its own, and
// package proxy as its); a Pipe's error wraps one of them.
var (
	// ErrLost means the connection broke while commands waited on it.
	ErrLost = errors.New("pipe: upstream connection lost")
	// ErrTimeout means the server sent no reply within the timeout.
	ErrTimeout = errors.New("pipe: upstream reply timeout")
	// ErrProtocol means the server sent bytes that are not RESP, or a
	// reply nothing waited for.
	ErrProtocol = resp.ErrProtocol
	// ErrUnsent is wrapped in every Send error: the batch was not
	// written, so it may go on another connection.
	ErrUnsent = errors.New("not sent")
	// ErrIdleClosed is Send's error for a connection found closed while
	// idle: the batch was not written.
	ErrIdleClosed = errors.New("closed while idle")
)

// Unavailable is the error a command gets when it cannot be sent to the
// upstream name, for reason (cause's text, or what stands for it):
// `-UPSTREAM <name> unavailable: <reason>`.
func Unavailable(name, reason string, cause error) *clienterr.Error {
	return clienterr.Wrap(clienterr.Upstream, name+" unavailable: "+reason, cause)
}

// UnavailableReply is the reply of Unavailable(name, reason, nil).
func UnavailableReply(name, reason string) []byte {
	return clienterr.Reply(Unavailable(name, reason, nil))
}

// lost is the error a command in flight gets when its connection to the
// upstream name is lost: the command may have been applied, and the client
// is told so. Such replies are marked on their batch (Batch.ReplyLost).
func lost(name string) *clienterr.Error {
	return clienterr.Wrap(clienterr.Upstream, "connection to "+name+" lost; the command may have been applied", ErrLost)
}

// errDroppedForBudget replaces a reply that did not fit in the memory
// budget (the batch's Acct).
var errDroppedForBudget = clienterr.New(clienterr.Proxy, "reply dropped: the proxy's memory budget (limits.buffered_bytes) is in use by other clients; the command was executed")
