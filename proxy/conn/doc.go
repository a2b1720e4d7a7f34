// Package conn is a client connection's bytes, both ways: the read buffer
// and its framing (package resp's Framer over the buffer), grown for what
// a command needs and shrunk back, its bytes taken from the memory budget
// (limits.Budget); the reads, blocking (Fill) or in a goroutine of their
// own for a session that waits for its client and for something else at
// once (ReadAsync, Reads, ReadDone, StopRead); and the output, the replies
// ready to write, held under the same budget and written in one write
// under the write deadline (package deadline).
//
// It is named for what it wraps, the client's net.Conn, and not for the
// client: what the client is (its authentication, its mode, its limits'
// rejections and their logs, when to read and for how long) is package
// session's, which gives a Conn what it needs as values (Options) and the
// read deadline with each read. A Conn reports what ends the session as
// errors (QueryBufferError, TooLargeError, the budget's ErrClosed, the
// connection's own) and the session acts on them: it counts and logs the
// rejection, answers a command larger than the budget (WriteError, or its
// subscriber's writer in subscribe mode) and lingers before closing
// (Linger).
//
// It must not import a package of the proxy above limits, deadline and
// resp, nor know about commands beyond their framing.
package conn
