package clienterr

import "errors"

// Kind is the error code a client reads first in an error reply.
type Kind uint8

// The kinds of error the proxy tells a client.
const (
	// Err is the server's code for an error: the proxy uses it where it
	// answers in the server's place, in the server's words.
	Err Kind = iota
	// Proxy is an error of the proxy's own limits, "ERR emqproxy: ...".
	Proxy
	// TryAgain means nothing was sent: the command may run again.
	TryAgain
	// Upstream means an upstream failed the command, or could not take it.
	Upstream
	// CrossRoute means the command's keys, or its transaction's, route to
	// two upstreams.
	CrossRoute
	// Refused means the proxy does not forward the command (EMQREFUSED).
	Refused
	// Fence means the command touches what belongs to the proxy's fence.
	Fence
)

// prefixes are what a reply of each kind starts with, before the detail.
var prefixes = [...]string{
	Err:        "-ERR ",
	Proxy:      "-ERR emqproxy: ",
	TryAgain:   "-TRYAGAIN ",
	Upstream:   "-UPSTREAM ",
	CrossRoute: "-CROSSROUTE ",
	Refused:    "-EMQREFUSED ",
	Fence:      "-FENCE ",
}

// String is the kind's error code as a client reads it.
func (k Kind) String() string {
	p := prefixes[k]
	return p[1 : len(p)-1]
}

// Error is an error the proxy tells a client.
type Error struct {
	Kind   Kind
	Detail string // what follows the code; a CR or LF in it becomes a space
	Cause  error  // the failure the detail reports, if any
}

// New is an error of kind k with detail.
func New(k Kind, detail string) *Error { return &Error{Kind: k, Detail: detail} }

// Wrap is an error of kind k with detail that reports cause.
func Wrap(k Kind, detail string, cause error) *Error {
	return &Error{Kind: k, Detail: detail, Cause: cause}
}

// Error is the error's text as a client reads it, without the leading '-'.
func (e *Error) Error() string { return prefixes[e.Kind][1:] + e.Detail }

// Unwrap is the failure the error reports.
func (e *Error) Unwrap() error { return e.Cause }

// Reply is the RESP error reply the client gets for err: the code of an
// *Error's kind and its detail on one line ("-TRYAGAIN ...\r\n"), the CR
// and LF bytes of the detail turned into spaces as the server does with
// the text of its errors. An err that is not an *Error, nor wraps one, is
// told as an -ERR with its text.
func Reply(err error) []byte {
	e, ok := err.(*Error)
	if !ok && !errors.As(err, &e) {
		e = &Error{Kind: Err, Detail: err.Error()}
	}
	p := prefixes[e.Kind]
	out := make([]byte, 0, len(p)+len(e.Detail)+2)
	out = append(out, p...)
	for i := range len(e.Detail) {
		c := e.Detail[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		out = append(out, c)
	}
	return append(out, '\r', '\n')
}
