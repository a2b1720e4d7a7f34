package rewrite

import "github.com/emqproxy/emqproxy/resp"

// isVersionKey reports whether b is exactly the version key.
func isVersionKey(b []byte) bool {
	return len(b) == len(VersionKey) && string(b) == VersionKey
}

// decideVersionKey handles a wire-4 session's commands that name the
// version key (proxy.md, "Fences", client side). ok is false when the
// command does not involve the key at a key position.
//
// Answered by the proxy: GET (the map's legacy brand while the upstream
// fence holds), SET ... NX (nil: the key exists; nothing is written; with
// GET the brand), EXISTS/TYPE/STRLEN/TTL/PTTL of the key alone (as for a
// string key holding the brand, without expiry). EXISTS of several keys
// including it passes while the fence holds (the upstream key exists, so
// the count is the one the brand would give). WATCH of it passes. Every
// other command with the key at a key position is refused, and so is every
// command the table has no key positions for that mentions the key in any
// argument. While the fence does not hold, the reads are refused too, so
// the client's own fence stops it.
func decideVersionKey(args [][]byte, info cmdInfo, sc *ScriptCall, st *State, p *Policy) (Decision, bool) {
	switch info.kind {
	case kWatch:
		return Decision{}, false
	case kGet, kType, kStrlen, kTTL:
		if len(args) == 2 && isVersionKey(args[1]) {
			if !st.Fenced {
				return refuse(replyNotFenced, ReasonVersionKey), true
			}
			return local(versionRead(info.kind, p), NoEffect), true
		}
	case kSet:
		if len(args) >= 3 && isVersionKey(args[1]) {
			return decideVersionSet(args, st, p), true
		}
	case kExists:
		n := 0
		for _, k := range args[1:] {
			if isVersionKey(k) {
				n++
			}
		}
		switch {
		case n == 0:
			return Decision{}, false
		case !st.Fenced:
			return refuse(replyNotFenced, ReasonVersionKey), true
		case n == len(args)-1:
			return local(resp.AppendInt(nil, int64(n)), NoEffect), true
		}
		return Decision{Action: Pass}, true
	case kEval, kEvalSha, kEvalRO, kEvalShaRO:
		if sc.Err != nil {
			return Decision{}, false
		}
		for _, k := range sc.Keys {
			if isVersionKey(k) {
				return refuse(replyVersionWrite, ReasonVersionKey), true
			}
		}
		return Decision{}, false
	}
	if namesVersionKey(args, info) {
		return refuse(replyVersionWrite, ReasonVersionKey), true
	}
	return Decision{}, false
}

// versionRead is the reply to a read of the key holding the legacy brand.
func versionRead(k kind, p *Policy) []byte {
	brand := legacyBrand(p)
	switch k {
	case kType:
		return replyString
	case kStrlen:
		return resp.AppendInt(nil, int64(len(brand)))
	case kTTL:
		return replyMinus1
	}
	return bulkReply([]byte(brand))
}

// decideVersionSet answers SET {emq}:version <v> NX [GET] [EX s|PX ms|EXAT
// t|PXAT t|KEEPTTL] with nil (with GET: the brand, as the key exists) and
// writes nothing; any other SET of the key is refused.
func decideVersionSet(args [][]byte, st *State, p *Policy) Decision {
	nx, get, xx, expiry := false, false, false, false
	for j := 3; j < len(args); j++ {
		a := args[j]
		switch {
		case EqualFold(a, "NX") && !nx:
			nx = true
		case EqualFold(a, "XX") && !xx:
			xx = true
		case EqualFold(a, "GET") && !get:
			get = true
		case EqualFold(a, "KEEPTTL") && !expiry:
			expiry = true
		case (EqualFold(a, "EX") || EqualFold(a, "PX") || EqualFold(a, "EXAT") || EqualFold(a, "PXAT")) &&
			!expiry && j+1 < len(args):
			expiry = true
			j++
		default:
			return refuse(replyVersionWrite, ReasonVersionKey)
		}
	}
	if !nx || xx {
		return refuse(replyVersionWrite, ReasonVersionKey)
	}
	if !get {
		return local(replyNil, NoEffect)
	}
	if !st.Fenced {
		return refuse(replyNotFenced, ReasonVersionKey)
	}
	return local(bulkReply([]byte(legacyBrand(p))), NoEffect)
}

// namesVersionKey reports whether the version key is at one of the
// command's key positions, or, when the table has none for it, in any
// argument.
func namesVersionKey(args [][]byte, info cmdInfo) bool {
	if info.flags&fNoKeys != 0 {
		return false
	}
	ks := info.keys
	if ks.first == 0 {
		for _, a := range args[1:] {
			if isVersionKey(a) {
				return true
			}
		}
		return false
	}
	last := int(ks.last)
	if last < 0 {
		last += len(args)
	}
	if last >= len(args) {
		last = len(args) - 1
	}
	for i := int(ks.first); i <= last; i += int(ks.step) {
		if isVersionKey(args[i]) {
			return true
		}
	}
	return false
}

// legacyBrand is the map's legacy brand ("" without a map).
func legacyBrand(p *Policy) string {
	if p.Map == nil {
		return ""
	}
	return p.Map.LegacyBrand
}
