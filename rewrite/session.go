package rewrite

// decideSession handles MULTI, EXEC, DISCARD, WATCH, UNWATCH and the
// subscribe commands, with the server's texts.
func decideSession(args [][]byte, k kind, st *State) Decision {
	switch k {
	case kMulti:
		switch {
		case len(args) != 1:
			return refuse(arityReply("multi"), ReasonArity)
		case st.InMulti:
			// The server refuses a nested MULTI without discarding the
			// transaction.
			return refuse(replyNested, ReasonProtocol)
		}
		return local(replyOK, Multi)
	case kExec:
		switch {
		case !st.InMulti && len(args) != 1:
			// The server answers EXEC's arity error this way with or
			// without MULTI.
			return refuse(replyExecArity, ReasonArity)
		case !st.InMulti:
			return refuse(replyExecNoMulti, ReasonProtocol)
		case len(args) != 1:
			d := refuse(replyExecArity, ReasonArity)
			d.Effect = Discard
			return d
		case st.MultiAborted:
			d := refuse(replyExecAbort, ReasonProtocol)
			d.Effect = Discard
			return d
		}
		return Decision{Action: Pass, Effect: Exec}
	case kDiscard:
		switch {
		case len(args) != 1:
			return refuse(arityReply("discard"), ReasonArity)
		case !st.InMulti:
			return refuse(replyDiscNoMulti, ReasonProtocol)
		}
		return local(replyOK, Discard)
	case kWatch:
		switch {
		case len(args) < 2:
			return refuse(arityReply("watch"), ReasonArity)
		case st.InMulti:
			// Refused without discarding the transaction, as the server does.
			return refuse(replyWatchMulti, ReasonProtocol)
		}
		return Decision{Action: Pass, Effect: Watch}
	case kUnwatch:
		switch {
		case len(args) != 1:
			return refuse(arityReply("unwatch"), ReasonArity)
		case st.InMulti:
			return Decision{Action: Pass}
		}
		return Decision{Action: Pass, Effect: Unwatch}
	case kSubscribe:
		if st.InMulti {
			return refuse(errReply("EMQREFUSED emqproxy does not queue '"+string(upperInto(nil, args[0]))+
				"' in MULTI: it would put a shared upstream connection in subscribe mode"), ReasonProtocol)
		}
		return Decision{Action: Pass, Effect: Subscribe}
	}
	return Decision{Action: Pass}
}

// xreadBlocks reports whether an XREAD/XREADGROUP has a BLOCK option before
// STREAMS.
func xreadBlocks(args [][]byte) bool {
	for _, a := range args[1:] {
		switch {
		case equalFold(a, "STREAMS"):
			return false
		case equalFold(a, "BLOCK"):
			return true
		}
	}
	return false
}
