package rewrite

// One reading of a script call, for every package that looks at one: the
// decision (Decide), the plan's routing and replica confirmation, the
// capture's redaction and the replay. Which command is a script call, its
// numkeys (with the server's error for a bad one), its keys, and the queue
// they name are answered here and nowhere else.

import "github.com/emqproxy/emqproxy/resp"

// ScriptKind is which script call a command is, by its name.
type ScriptKind uint8

// The script calls. EVAL and EVAL_RO send the script's body, EVALSHA and
// EVALSHA_RO its sha, FCALL and FCALL_RO a function's name; each then has
// numkeys, the keys and the values.
const (
	NotScript ScriptKind = iota
	ScriptEval
	ScriptEvalRO
	ScriptEvalSha
	ScriptEvalShaRO
	ScriptFCall
	ScriptFCallRO
)

// ScriptKindOf returns which script call a command named name (any case)
// is, NotScript for any other command. It does not allocate.
func ScriptKindOf(name []byte) ScriptKind {
	switch len(name) {
	case 4:
		if EqualFold(name, "EVAL") {
			return ScriptEval
		}
	case 5:
		if EqualFold(name, "FCALL") {
			return ScriptFCall
		}
	case 7:
		switch {
		case EqualFold(name, "EVALSHA"):
			return ScriptEvalSha
		case EqualFold(name, "EVAL_RO"):
			return ScriptEvalRO
		}
	case 8:
		if EqualFold(name, "FCALL_RO") {
			return ScriptFCallRO
		}
	case 10:
		if EqualFold(name, "EVALSHA_RO") {
			return ScriptEvalShaRO
		}
	}
	return NotScript
}

// scriptKindOf is the script call of a command the table classified (the
// table has no FCALL: the deny list refuses it before a kind is asked).
func scriptKindOf(k kind) ScriptKind {
	switch k {
	case kEval:
		return ScriptEval
	case kEvalRO:
		return ScriptEvalRO
	case kEvalSha:
		return ScriptEvalSha
	case kEvalShaRO:
		return ScriptEvalShaRO
	}
	return NotScript
}

// ReadOnly reports whether the call is a read-only form (EVAL_RO,
// EVALSHA_RO, FCALL_RO): the server refuses any write it tries.
func (k ScriptKind) ReadOnly() bool {
	return k == ScriptEvalRO || k == ScriptEvalShaRO || k == ScriptFCallRO
}

// Eval reports whether the call is one of the EVAL family (EVAL,
// EVALSHA and their _RO forms), the calls Decide reads as script calls
// (pinned, rewritten, refused). FCALL is on the default deny list; where a
// policy allows it, it passes as a plain command, its keys the server's
// command table gives.
func (k ScriptKind) Eval() bool { return k >= ScriptEval && k <= ScriptEvalShaRO }

// Body reports whether the call's first argument is the script's body
// (EVAL, EVAL_RO), which may hold anything, rather than a sha or a
// function's name.
func (k ScriptKind) Body() bool { return k == ScriptEval || k == ScriptEvalRO }

// ScriptCall is a command read as a script call.
type ScriptCall struct {
	// Kind is which call it is; NotScript for another command (and then
	// nothing else is set).
	Kind ScriptKind
	// Keys are its keys: the arguments after numkeys, as many as numkeys
	// says. They point into the command's arguments (capacity cut at the
	// last key). nil when Err is set.
	Keys [][]byte
	// Err is the server's error reply to the call's numkeys (not an
	// integer, negative, more than the arguments), also for a call too
	// short to have one (the server answers that with its arity error,
	// which the caller knows by len(args) < 3); nil when Keys are the
	// call's keys.
	Err []byte
}

// ParseScriptCall reads args as a script call: its kind by its name
// (ScriptKindOf), and for a script call its numkeys, parsed as the server
// does (ParseInt), its keys, or the server's error for its numkeys. It
// never fails on malformed input: a caller that must not refuse anything
// (the capture's redaction, the replay of a recorded call) reads Err as
// "the call has no keys that can be told" and decides what that means for
// it. It does not allocate.
func ParseScriptCall(args [][]byte) ScriptCall {
	if len(args) == 0 {
		return ScriptCall{}
	}
	return parseScriptCall(ScriptKindOf(args[0]), args)
}

// parseScriptCall reads args as the script call k (NotScript: nothing).
func parseScriptCall(k ScriptKind, args [][]byte) ScriptCall {
	c := ScriptCall{Kind: k}
	switch {
	case k == NotScript:
	case len(args) < 3:
		c.Err = replyNotInt
	default:
		n, ok := resp.ParseInt(args[2])
		switch {
		case !ok:
			c.Err = replyNotInt
		case n > int64(len(args)-3):
			c.Err = replyManyKeys
		case n < 0:
			c.Err = replyNegKeys
		default:
			c.Keys = args[3 : 3+n : 3+n]
		}
	}
	return c
}

// NumKeys returns the call's numkeys, and false when the server would
// refuse it (Err).
func (c *ScriptCall) NumKeys() (int, bool) {
	if c.Err != nil || c.Kind == NotScript {
		return 0, false
	}
	return len(c.Keys), true
}

// Queue is the queue the call belongs to: its first key's (QueueOf's
// FirstKey rule).
func (c *ScriptCall) Queue() []byte {
	if len(c.Keys) == 0 {
		return nil
	}
	return Hashtag(c.Keys[0])
}

// QueueRule says which of a command's arguments QueueOf reads.
type QueueRule uint8

const (
	// FirstKey: the arguments are the command's keys, and its queue is
	// the hashtag of the first of them (nil when it has none): the rule of
	// routing, admission, the audit log and the capture of script calls.
	FirstKey QueueRule = iota
	// FirstJobKey: the arguments are any of the command's arguments, and
	// its queue is the hashtag of the first one that is a job-core key
	// (emq:{<queue>}:...). The capture uses it for plain commands, whose
	// key positions it may not know (a command whose keys only COMMAND
	// GETKEYS tells, which the capture must not ask) and which it records
	// under the job-core queue they touch, a key or a value naming one.
	FirstJobKey
)

// QueueOf returns the queue that args name under rule: a hashtag's
// content (Hashtag, the queue one key names: the plan reads each key's
// with it), pointing into args, or nil for none.
func QueueOf(args [][]byte, rule QueueRule) []byte {
	if rule == FirstKey {
		if len(args) == 0 {
			return nil
		}
		return Hashtag(args[0])
	}
	for _, a := range args {
		if len(a) > 5 && string(a[:5]) == "emq:{" {
			if q := Hashtag(a); q != nil {
				return q
			}
		}
	}
	return nil
}
