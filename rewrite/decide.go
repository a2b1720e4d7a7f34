package rewrite

import "bytes"

// Decide returns the decision for one command. args[0] is the command name
// as the client sent it (any case). Decide does not modify args, st or p,
// and keeps no reference to args beyond the returned Decision (Queue and
// Arg point into args).
//
// The rule, in order: authentication, connection-local commands, the deny
// list, the version key (wire-4 sessions), scripts, session commands, and
// everything else passes. Inside MULTI a refused command also carries
// AbortMulti (except a nested MULTI and WATCH, which the server refuses
// without discarding the transaction), and a command the proxy would
// answer itself is refused instead of being queued.
func Decide(args [][]byte, st *State, p *Policy) Decision {
	if len(args) == 0 {
		return refuse(replyEmpty, ReasonProtocol)
	}
	var buf [maxName]byte
	up, info, known := lookup(&buf, args[0])
	d := decide(args, up, info, known, st, p)
	if st.Proto == 3 && d.Action == Local {
		d.Reply = resp3Null(d.Reply)
	}
	if !st.InMulti {
		return d
	}
	switch info.kind {
	case kMulti, kExec, kDiscard, kQuit, kReset:
	default:
		if d.Action == Local {
			d.Action, d.Effect, d.Reason = Refuse, NoEffect, ReasonProtocol
			d.User, d.Arg, d.SetsName = "", nil, false
			d.Reply = errReply("EMQREFUSED emqproxy answers '" + cmdLabel(up, args, info) +
				"' itself and cannot queue it in MULTI")
		}
	}
	// The server refuses a nested MULTI and WATCH inside MULTI without
	// discarding the transaction; every other refusal discards it.
	if d.Action == Refuse && d.Effect == NoEffect &&
		!bytes.Equal(d.Reply, replyNested) && !bytes.Equal(d.Reply, replyWatchMulti) {
		d.Effect = AbortMulti
	}
	return d
}

// decide applies the rule outside of the MULTI adjustments.
func decide(args [][]byte, up []byte, info cmdInfo, known bool, st *State, p *Policy) Decision {
	// 1. Authentication.
	if len(p.Users) > 0 && !st.Authenticated {
		switch info.kind {
		case kAuth, kHello, kQuit, kReset:
		default:
			return refuse(replyNoAuth, ReasonNoAuth)
		}
	}

	// 2. Connection-local.
	switch info.kind {
	case kAuth:
		return decideAuth(args, p)
	case kHello:
		return decideHello(args, st, p)
	case kPing:
		return decidePing(args, st)
	case kEcho:
		return decideEcho(args, st)
	case kQuit:
		return local(replyOK, Quit)
	case kReset:
		if len(args) != 1 {
			return refuse(arityReply("reset"), ReasonArity)
		}
		return local(replyReset, Reset)
	case kSelect:
		return decideSelect(args, st, p)
	case kClient:
		if d, ok := decideClient(args, st, p); ok {
			return d
		}
	case kACL:
		if len(args) >= 2 && EqualFold(args[1], "WHOAMI") {
			return decideWhoami(args, st)
		}
	}

	// 3. Denied.
	if name, ok := denied(args, up, info, known, p); ok {
		return refuse(errReply("DENIED emqproxy does not forward '"+name+"'"), ReasonDenied)
	}

	// 4. The version key, for wire-4 sessions.
	if info.kind == kEmqVersion {
		return Decision{Action: Pass, Effect: Wire6}
	}
	var sc ScriptCall // parsed only for a script call: a plain command pays nothing
	if k := scriptKindOf(info.kind); k != NotScript {
		sc = parseScriptCall(k, args)
	}
	if !st.Wire6 {
		if d, ok := decideVersionKey(args, info, &sc, st, p); ok {
			return d
		}
	}

	// 5. Scripts.
	switch info.kind {
	case kEvalSha, kEval, kEvalShaRO, kEvalRO:
		return decideScript(args, info.kind, &sc, st, p)
	case kScript:
		return decideScriptCmd(args, p)
	}

	// 6. Sessions.
	switch info.kind {
	case kMulti, kExec, kDiscard, kWatch, kUnwatch, kSubscribe:
		return decideSession(args, info.kind, st)
	case kUnsubscribe:
		return decideUnsubscribe(args, up, st)
	case kBlocking:
		if !st.InMulti {
			return Decision{Action: Pass, Effect: Blocking}
		}
	case kXread:
		if !st.InMulti && xreadBlocks(args) {
			return Decision{Action: Pass, Effect: Blocking}
		}
	}

	// 7. Everything else.
	return Decision{Action: Pass}
}
