package capture

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
)

// StandIn returns the stand-in of a payload value: as long as v, made of
// the hex SHA-1 of v repeated (then of the SHA-1 of that text, and so on,
// past 40 bytes), so equal values get equal stand-ins on every run.
func StandIn(v []byte) []byte {
	out := make([]byte, 0, len(v))
	sum := sha1.Sum(v)
	for len(out) < len(v) {
		h := hex.EncodeToString(sum[:])
		out = append(out, h[:min(len(h), len(v)-len(out))]...)
		sum = sha1.Sum([]byte(h))
	}
	return out
}

// redact replaces the record's payload values with their stand-ins, in its
// arguments and its reply, and sets FlagRedacted. It owns r's slices.
func redact(r *Record) {
	r.Flags |= FlagRedacted
	if r.Script != "" {
		redactCall(r)
		return
	}
	// A plain command: values after a "payload" or "error" argument (a
	// row written field by field), and every bulk string of the reply.
	for i := 2; i < len(r.Args); i++ {
		if isPayloadField(r.Args[i-1]) {
			r.Args[i] = StandIn(r.Args[i])
		}
	}
	v, err := ParseReply(r.Reply)
	if err != nil || !hasBulk(v) {
		return
	}
	standInBulks(&v)
	r.Reply = v.AppendRESP(nil)
	r.Flags |= FlagShapeOnly
}

// redactCall redacts a script call: EVALSHA/EVAL <sha|body> numkeys
// keys... values..., and the reply elements the script's shape names.
func redactCall(r *Record) {
	if len(r.Args) >= 3 {
		if nk, err := strconv.Atoi(string(r.Args[2])); err == nil && nk >= 0 {
			for _, j := range r.payload.Values {
				if i := 3 + nk + j - 1; i < len(r.Args) {
					r.Args[i] = StandIn(r.Args[i])
				}
			}
		}
	}
	if len(r.payload.Reply) == 0 {
		return
	}
	v, err := ParseReply(r.Reply)
	if err != nil || v.Type != '*' || v.Nil {
		return
	}
	changed := false
	for _, j := range r.payload.Reply {
		if j >= 1 && j <= len(v.Elems) && v.Elems[j-1].Type == '$' && !v.Elems[j-1].Nil {
			v.Elems[j-1].Str = StandIn(v.Elems[j-1].Str)
			changed = true
		}
	}
	if changed {
		r.Reply = v.AppendRESP(nil)
	}
}

func isPayloadField(a []byte) bool {
	return bytes.EqualFold(a, []byte("payload")) || bytes.EqualFold(a, []byte("error"))
}

func hasBulk(v Value) bool {
	if v.Type == '$' && !v.Nil {
		return true
	}
	for _, e := range v.Elems {
		if hasBulk(e) {
			return true
		}
	}
	return false
}

func standInBulks(v *Value) {
	if v.Type == '$' && !v.Nil {
		v.Str = StandIn(v.Str)
	}
	for i := range v.Elems {
		standInBulks(&v.Elems[i])
	}
}
