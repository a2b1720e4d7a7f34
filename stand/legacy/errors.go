package legacy

import (
	"errors"
	"strconv"
)

// Sentinel errors of the package; every returned error wraps one of them, or
// is a valkey-go error (a server error reply, a connection error) wrapped
// with the operation's name.
var (
	// ErrFence is wrapped by every *FenceError.
	ErrFence = errors.New("legacy: version fence")
	// ErrBoot means a boot command (AUTH, SELECT, CLIENT SETNAME) failed.
	ErrBoot = errors.New("legacy: boot command failed")
	// ErrClosed means the client was closed, or a Reconnect failed and left
	// it without a connection.
	ErrClosed = errors.New("legacy: client closed")
	// ErrReply means a reply had a shape the operation does not answer.
	ErrReply = errors.New("legacy: unexpected reply")
	// ErrScript means a script body is missing or a pin does not match it.
	ErrScript = errors.New("legacy: script")
	// ErrRefused is wrapped by every *ReplyError: the server (or the proxy)
	// answered the call with an error reply.
	ErrRefused = errors.New("legacy: error reply")
	// ErrProtocol means a boot or fence reply could not be read.
	ErrProtocol = errors.New("legacy: protocol")
)

// FenceError is the wire-4 fence's refusal, {:version_fence, got}: the
// version key held a value other than the client's own brand, or stayed
// absent after SET NX, or GET answered an error (the proxy answers one while
// its upstream fence does not hold).
type FenceError struct {
	Got     string // the value found ("" when Absent or Refused)
	Absent  bool   // the key was absent even after SET NX
	Refused string // the error text GET answered, when it answered one
}

// Error prints the refusal as the connector does: {:version_fence, "echomq:6.0.0"},
// {:version_fence, :absent} or {:version_fence, {:error, "<text>"}}.
func (e *FenceError) Error() string {
	switch {
	case e.Absent:
		return "{:version_fence, :absent}"
	case e.Refused != "":
		return "{:version_fence, {:error, " + strconv.Quote(e.Refused) + "}}"
	}
	return "{:version_fence, " + strconv.Quote(e.Got) + "}"
}

// Unwrap returns ErrFence.
func (e *FenceError) Unwrap() error { return ErrFence }
