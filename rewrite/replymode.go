package rewrite

// CLIENT REPLY ON|OFF|SKIP.
//
// The mode is the client's own business: the proxy keeps it for the
// session, as the server keeps it for a connection, and never forwards the
// command. The commands a silenced client sends are decided, sent and
// executed as always, and their replies read from the upstream as always
// (a shared connection stays in step); only the copy for the client is
// dropped: in normal service at the last step (package segment's
// Emit), in subscribe mode by the relay (package pubsub), which drops the replies while it is muted
// and passes the pushes (messages, subscribe confirmations,
// invalidations), as Redis 7.0.15 and Valkey 8 do. Every reply is
// silenced alike: the server's and the proxy's own (its refusals, the
// unsubscribe family's answers, a protocol error before the connection
// closes), as the server drops its errors too. One outcome is not a reply
// the server would have sent: a silenced command whose upstream connection
// broke in flight ("-UPSTREAM ... may have been applied") closes the
// client's connection after the replies before it, which is what the
// client would see of a server connection lost under it, so the loss is
// never silent. QUIT and a protocol error, silenced, still close the
// connection (the server leaves such a connection open and never reads it
// again). Audit records still carry the replies.
//
// CLIENT REPLY inside MULTI is refused (Decide): the server would
// silence the rest of EXEC's array under a header that counts it.

// ReplyMode is a connection's CLIENT REPLY state, as the server keeps it.
type ReplyMode struct {
	off      bool // OFF: every reply is dropped until ON
	skip     bool // the current command's reply is dropped (a SKIP before it)
	skipNext bool // SKIP: the next command's reply is dropped
}

// Command starts a command whose decision has Effect e: it applies the
// command's own effect on the mode and reports whether its reply is
// dropped. Called once per command, in order.
func (m *ReplyMode) Command(e Effect) (drop bool) {
	m.skip, m.skipNext = m.skipNext, false
	switch e {
	case ReplyOn:
		m.off, m.skip = false, false
	case ReplyOff:
		m.off = true
	case ReplySkip:
		if !m.off {
			m.skipNext = true
		}
	case Reset:
		// RESET ends OFF and a pending SKIP; a SKIP just before it still
		// silences its own +RESET (the server clears the flag after).
		m.off = false
	}
	return m.off || m.skip
}

// Muted reports whether every reply is dropped for now (OFF).
func (m *ReplyMode) Muted() bool { return m.off }
