package rewrite

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/shamap"
)

// decideScript handles EVALSHA, EVAL, EVALSHA_RO and EVAL_RO.
//
//   - numkeys is checked first, with the server's texts (ParseScriptCall);
//   - a verb script (EVALSHA/EVAL) must have its pinned shape, then leaves
//     as EMQ.<TOKEN> with the identical tail (Rewrite, Replace 2);
//   - a read script leaves as EVALSHA_RO/EVAL_RO (Rewrite, Replace 1), so
//     a script declared a read by mistake cannot write: the server aborts
//     its first write; an _RO call of it passes unchanged. Its shape is not
//     enforced (the script sees what the client sent, as it would without
//     the proxy);
//   - a verb script through EVALSHA_RO/EVAL_RO is refused: it is a write;
//   - an unknown script is refused, or under ReadonlyUnknown sent as
//     EVALSHA_RO/EVAL_RO (Rewrite, Replace 1); an _RO call of an unknown
//     script passes under ReadonlyUnknown.
func decideScript(args [][]byte, k kind, sc *ScriptCall, st *State, p *Policy) Decision {
	if len(args) < 3 {
		return refuse(arityReply(scriptCmdName(k)), ReasonArity)
	}
	if sc.Err != nil {
		return refuse(sc.Err, ReasonNumkeys)
	}
	n := len(sc.Keys)
	var s *shamap.Script
	var hexsha [40]byte
	if k == kEval || k == kEvalRO {
		sum := sha1.Sum(args[1])
		hex.Encode(hexsha[:], sum[:])
		s = lookupSHA(p, hexsha[:])
	} else {
		s = lookupSHA(p, args[1])
	}
	d := Decision{Keys: sc.Keys, Queue: sc.Queue()}
	if s == nil {
		if k == kEval || k == kEvalRO {
			d.SHA = string(hexsha[:])
		} else {
			d.SHA = lowerSHA(args[1])
		}
		if p.Unknown != ReadonlyUnknown {
			d.Action, d.Reason = Refuse, ReasonUnknownScript
			d.Reply = errReply("EMQREFUSED script " + d.SHA + " is not pinned; emqproxy does not run unpinned scripts")
			return d
		}
		return readOnly(d, k)
	}
	d.Script, d.SHA = s, s.SHA
	if s.Read {
		return readOnly(d, k)
	}
	if k == kEvalRO || k == kEvalShaRO {
		d.Action, d.Reason = Refuse, ReasonUnknownScript
		d.Reply = errReply("EMQREFUSED script " + s.SHA + " is the write verb " + s.Command +
			"; it cannot run read-only")
		return d
	}
	if n != s.Keys {
		d.Action, d.Reason = Refuse, ReasonShape
		d.Reply = errReply("EMQWIRE " + s.Command + " wants " + strconv.Itoa(s.Keys) +
			" keys, got " + strconv.Itoa(n))
		return d
	}
	if v := len(args) - 3 - n; v != s.Values {
		d.Action, d.Reason = Refuse, ReasonShape
		d.Reply = errReply("EMQWIRE " + s.Command + " wants " + strconv.Itoa(s.Values) +
			" values, got " + strconv.Itoa(v))
		return d
	}
	d.Action, d.Head, d.Replace = Rewrite, s.Command, 2
	return d
}

// scriptCmdName is the lower-case name for arity errors.
func scriptCmdName(k kind) string {
	switch k {
	case kEval:
		return "eval"
	case kEvalRO:
		return "eval_ro"
	case kEvalShaRO:
		return "evalsha_ro"
	}
	return "evalsha"
}

// lookupSHA finds a pinned script by sha (any case).
func lookupSHA(p *Policy, sha []byte) *shamap.Script {
	if p.Map == nil {
		return nil
	}
	s, _ := p.Map.Lookup(sha)
	return s
}

// maxQuoted bounds how much of a client's "sha" a refusal quotes.
const maxQuoted = 64

// lowerSHA is the sha as the client named it, in lower case (cut to
// maxQuoted bytes, marked with "...", when longer).
func lowerSHA(b []byte) string {
	if len(b) > maxQuoted {
		return string(LowerInto(make([]byte, 0, maxQuoted+3), b[:maxQuoted])) + "..."
	}
	return string(LowerInto(make([]byte, 0, len(b)), b))
}

// Hashtag returns the content of key's hash tag as the server computes it
// (the bytes between the first '{' and the first '}' after it), or nil when
// the key has none or it is empty: for a job-core key emq:{q}:..., the queue.
// It points into key.
func Hashtag(key []byte) []byte {
	for i, c := range key {
		if c != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return nil
				}
				return key[i+1 : j]
			}
		}
		return nil
	}
	return nil
}

// decideScriptCmd handles SCRIPT LOAD and SCRIPT EXISTS (SCRIPT FLUSH and
// KILL are on the deny list; SCRIPT DEBUG would turn a shared upstream
// connection into a debugger session and is refused).
//
//   - SCRIPT LOAD of a verb body: the proxy answers its sha and loads
//     nothing; a read body passes; an unknown body is refused, or passes
//     under ReadonlyUnknown (so a later EVALSHA_RO finds it).
//   - SCRIPT EXISTS: all verb shas: answered locally with 1s; no verb
//     sha: passes; a mix: passes with Effect ScriptExists, and the session
//     patches the reply with PatchScriptExists.
func decideScriptCmd(args [][]byte, p *Policy) Decision {
	if len(args) < 2 {
		return refuse(arityReply("script"), ReasonArity)
	}
	sub := args[1]
	switch {
	case EqualFold(sub, "LOAD"):
		if len(args) != 3 {
			return refuse(arityReply("script|load"), ReasonArity)
		}
		sum := sha1.Sum(args[2])
		var hexsha [40]byte
		hex.Encode(hexsha[:], sum[:])
		s := lookupSHA(p, hexsha[:])
		if s == nil {
			d := Decision{Action: Pass, SHA: string(hexsha[:])}
			if p.Unknown != ReadonlyUnknown {
				d.Action, d.Reason = Refuse, ReasonUnknownScript
				d.Reply = errReply("EMQREFUSED script " + d.SHA + " is not pinned; emqproxy does not load unpinned scripts")
			}
			return d
		}
		d := Decision{Action: Pass, Script: s, SHA: s.SHA}
		if s.Verb != "" {
			d.Action, d.Reply = Local, bulkReply([]byte(s.SHA))
		}
		return d
	case EqualFold(sub, "EXISTS"):
		if len(args) < 3 {
			return refuse(arityReply("script|exists"), ReasonArity)
		}
		verbs := 0
		for _, sha := range args[2:] {
			if s := lookupSHA(p, sha); s != nil && s.Verb != "" {
				verbs++
			}
		}
		switch verbs {
		case 0:
			return Decision{Action: Pass}
		case len(args) - 2:
			b := resp.AppendArray(make([]byte, 0, 8+4*verbs), verbs)
			for range verbs {
				b = append(b, ":1\r\n"...)
			}
			return local(b, NoEffect)
		}
		return Decision{Action: Pass, Effect: ScriptExists}
	case EqualFold(sub, "DEBUG"):
		return refuse(errReply("EMQREFUSED emqproxy does not forward 'SCRIPT DEBUG': it would change a shared upstream connection"),
			ReasonProtocol)
	}
	return Decision{Action: Pass}
}

// GlobEscape escapes the glob characters of s for a SCAN MATCH pattern (a
// queue name inside a pattern of its keys: the mover and the replay scan
// with it).
func GlobEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// readOnly sends a script call as its read-only form: EVALSHA as
// EVALSHA_RO, EVAL as EVAL_RO, a call already read-only as it is. The
// server then refuses any write the script tries.
func readOnly(d Decision, k kind) Decision {
	switch k {
	case kEvalSha:
		d.Action, d.Head, d.Replace = Rewrite, "EVALSHA_RO", 1
	case kEval:
		d.Action, d.Head, d.Replace = Rewrite, "EVAL_RO", 1
	default:
		d.Action = Pass
	}
	return d
}
