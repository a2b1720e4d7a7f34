package pipe

import (
	"errors"

	"github.com/emqproxy/emqproxy/resp"
)

// The failures of a Pipe (package upstream exports them as its own, and
// package proxy as its); a Pipe's error wraps one of them.
var (
	// ErrLost means the connection broke while commands waited on it.
	ErrLost = errors.New("proxy: upstream connection lost")
	// ErrTimeout means the server sent no reply within the timeout.
	ErrTimeout = errors.New("proxy: upstream reply timeout")
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

// UnavailableReply is the error a command gets when it cannot be sent to
// the upstream name, with the reason on one line:
// `-UPSTREAM <name> unavailable: <reason>`.
func UnavailableReply(name, reason string) []byte {
	return []byte("-UPSTREAM " + name + " unavailable: " + resp.OneLine(reason) + "\r\n")
}
