package rewrite

import "github.com/emqproxy/emqproxy/resp"

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
		case EqualFold(a, "STREAMS"):
			return false
		case EqualFold(a, "BLOCK"):
			return true
		}
	}
	return false
}

// NoSub is what a server answers to the unsubscribe family outside
// subscribe mode when it refuses them (Valkey 8: `-NOSUB 'unsubscribe'
// command executed not in subscribed mode`, whatever the arguments): the
// server's reply to each command, or nil for a command it answers per
// channel, as Redis 7.0 does.
type NoSub struct {
	Unsubscribe, PUnsubscribe, SUnsubscribe []byte
}

// decideUnsubscribe answers UNSUBSCRIBE, PUNSUBSCRIBE and SUNSUBSCRIBE
// outside subscribe mode (in subscribe mode the proxy sends them to the
// client's own connection, deciding only those a subscribed RESP3 client
// queues in MULTI, which pass), as the server does:
// with st.NoSub's refusal where the server refuses them, else one reply
// per channel named (one with a nil channel when none is), each with a
// count of 0, as arrays in RESP2 and pushes in RESP3. The commands never
// travel on a shared connection, where they would answer more than once.
// Inside MULTI, where Redis 7.0 would put every per-channel reply into
// EXEC's array under a header that counts one, the command is refused and
// the transaction discarded.
func decideUnsubscribe(args [][]byte, up []byte, st *State) Decision {
	if st.Subscribed {
		// A subscribed RESP3 client's command (the bridge decides only
		// those it queues in MULTI): on its own connection, whose server
		// answers it, once per channel, inside EXEC's reply.
		return Decision{Action: Pass}
	}
	name := "unsubscribe"
	var refusal []byte
	if st.NoSub != nil {
		refusal = st.NoSub.Unsubscribe
	}
	switch string(up) {
	case "PUNSUBSCRIBE":
		name = "punsubscribe"
		if st.NoSub != nil {
			refusal = st.NoSub.PUnsubscribe
		}
	case "SUNSUBSCRIBE":
		name = "sunsubscribe"
		if st.NoSub != nil {
			refusal = st.NoSub.SUnsubscribe
		}
	}
	if refusal != nil {
		return refuse(refusal, ReasonProtocol)
	}
	if st.InMulti {
		// Decide turns the local answer into a refusal with AbortMulti.
		return local(nil, NoEffect)
	}
	head := "*3\r\n"
	if st.Proto == 3 {
		head = ">3\r\n"
	}
	one := func(b []byte, ch []byte, nilCh bool) []byte {
		b = append(b, head...)
		b = resp.AppendBulk(b, []byte(name))
		switch {
		case !nilCh:
			b = resp.AppendBulk(b, ch)
		case st.Proto == 3:
			b = append(b, replyNull...)
		default:
			b = append(b, replyNil...)
		}
		return append(b, ":0\r\n"...)
	}
	if len(args) == 1 {
		return local(one(make([]byte, 0, 48), nil, true), NoEffect)
	}
	size := 0
	for _, ch := range args[1:] {
		size += 40 + len(ch)
	}
	b := make([]byte, 0, size)
	for _, ch := range args[1:] {
		b = one(b, ch, false)
	}
	return local(b, NoEffect)
}
