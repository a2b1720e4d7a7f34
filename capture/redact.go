package capture

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/maphash"
	"strings"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Redaction (Options.Redact): what a redacted capture keeps in clear is
// the structure a replay needs, and nothing the application put in:
//
//   - a pinned script call keeps its sha, numkeys, keys and the values its
//     shape names as structure (ids, integers); the payload positions
//     (shamap.Script.Payload) become stand-ins, in the call and the reply;
//   - a plain command keeps its name (and subcommand), its keys (the
//     positions the server's command table gives; without them, the
//     arguments that are keys of the record's queue), a script call's sha
//     or function name and numkeys, and, on a job row, the contract's field
//     names and the values of its structural fields (state, attempts,
//     lease_epoch); every other argument becomes a stand-in, and so does
//     every bulk, verbatim, double and big number of its reply, in RESP2 and
//     RESP3 alike; that reply then keeps only its shape (FlagShapeOnly);
//   - an error reply, of a call or a command, keeps its code (the first
//     word, when it is upper case: ERR, WRONGTYPE, NOSCRIPT) and its text
//     becomes a stand-in, and the reply is compared by shape only.
//
// A stand-in has the length of its value and is made of hex digits from
// HMAC-SHA256 of the value under a secret drawn at random for each capture
// and never written anywhere (expanded, for a long value, by AES-CTR keyed
// with that HMAC): equal values get equal stand-ins within one
// capture (the ENQUEUE that wrote a payload and the CLAIM that returned it
// agree, so a replay still matches), a stand-in tells nothing of its value
// without the secret (however short the value), and two captures give the
// same value different stand-ins.

// redactor replaces a capture's job data by stand-ins. It is used by the
// writer's goroutine only.
type redactor struct {
	mac      hash.Hash
	sum      []byte
	raw, hex []byte // standIn's buffers
	keep     []bool
	memo     *[memoSlots]memoEntry
	seed     maphash.Seed
}

// The stand-ins of recent short values are kept (a direct-mapped cache
// over the values, in memory only): the payload a CLAIM returns is most
// often one an ENQUEUE wrote moments before, and its stand-in is then
// copied instead of computed again.
const (
	memoMax   = 2 * sha256.Size // the values whose stand-in is the HMAC's hex alone
	memoSlots = 1 << 9
)

type memoEntry struct {
	n    int // the value's length + 1; 0: empty
	v, s [memoMax]byte
}

// newRedactor draws the capture's secret.
func newRedactor() *redactor {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (it aborts the process instead)
	return &redactor{mac: hmac.New(sha256.New, key), memo: new([memoSlots]memoEntry), seed: maphash.MakeSeed()}
}

// standIn replaces v, in place, by its stand-in: as long as v, the hex of
// its HMAC, and past 64 bytes the hex of an AES-256-CTR keystream keyed by
// that HMAC (a pseudorandom expansion of it at memory speed). The writer
// owns a record's slices, so no copy is made.
func (z *redactor) standIn(v []byte) {
	var e *memoEntry
	if len(v) <= memoMax {
		e = &z.memo[maphash.Bytes(z.seed, v)&(memoSlots-1)]
		if e.n == len(v)+1 && bytes.Equal(e.v[:len(v)], v) {
			copy(v, e.s[:len(v)])
			return
		}
	}
	z.mac.Reset()
	z.mac.Write(v)
	z.sum = z.mac.Sum(z.sum[:0])
	if len(v) <= hex.EncodedLen(len(z.sum)) {
		var block [2 * sha256.Size]byte
		hex.Encode(block[:], z.sum)
		e.n = len(v) + 1
		copy(e.v[:], v)
		copy(v, block[:])
		e.s = block
		return
	}
	blk, err := aes.NewCipher(z.sum)
	if err != nil {
		panic(err) // a 32-byte key is always an AES-256 key
	}
	n := (len(v) + 1) / 2
	z.raw = append(z.raw[:0], make([]byte, n)...)
	cipher.NewCTR(blk, make([]byte, aes.BlockSize)).XORKeyStream(z.raw, z.raw)
	z.hex = append(z.hex[:0], make([]byte, 2*n)...)
	hex.Encode(z.hex, z.raw)
	copy(v, z.hex)
}

// redact replaces the record's job data with stand-ins, in its arguments
// and its reply, and sets FlagRedacted. It owns r's slices.
func (z *redactor) redact(r *Record) {
	r.Flags |= FlagRedacted
	if r.Script != "" {
		z.redactCall(r)
	} else {
		z.redactPlain(r)
	}
}

// unparsed replaces a reply redaction could not read: nothing of it is
// kept, and the replay compares it by shape (a production difference).
const unparsed = "-REDACTED the reply could not be parsed for redaction; it was not kept\r\n"

// redactCall redacts a pinned script call: EVALSHA/EVAL <sha|body> numkeys
// keys... values..., the reply elements the script's shape names, and any
// error in the reply.
func (z *redactor) redactCall(r *Record) {
	// numkeys as the server reads it: the proxy forwards no pinned call
	// whose numkeys the server refuses, so one that does not read has no
	// values that can be told apart, and none is replaced.
	sc := rewrite.ParseScriptCall(r.Args)
	if nk, ok := sc.NumKeys(); ok {
		for _, j := range r.payload.Values {
			if i := 3 + nk + j - 1; i < len(r.Args) {
				z.standIn(r.Args[i])
			}
		}
	}
	if plainReply(r.Reply) {
		return // an integer or a status: nothing in it to replace
	}
	v, err := resp.Parse(r.Reply)
	if err != nil {
		r.Reply, r.Flags = []byte(unparsed), r.Flags|FlagShapeOnly
		return
	}
	// The stand-ins replace the values in r.Reply itself.
	if v.Type == '*' && !v.Nil {
		for _, j := range r.payload.Reply {
			if j >= 1 && j <= len(v.Elems) {
				z.standInValue(&v.Elems[j-1], false)
			}
		}
	}
	if z.standInValue(&v, true) {
		r.Flags |= FlagShapeOnly // an error's text is a stand-in
	}
}

// plainReply reports whether b is one well-formed integer or simple string
// reply (as resp.Parse would take it): a call's reply with no payload and
// no error in it, the most common ones, known without parsing them.
func plainReply(b []byte) bool {
	if len(b) < 3 || (b[0] != ':' && b[0] != '+') || bytes.Index(b, []byte("\r\n")) != len(b)-2 {
		return false
	}
	if b[0] == '+' {
		return true
	}
	_, ok := resp.ParseInt(b[1 : len(b)-2])
	return ok
}

// redactPlain redacts a plain command: every argument but its structure
// (keepArgs), and every content of its reply.
func (z *redactor) redactPlain(r *Record) {
	keep := z.keepArgs(r)
	for i := range r.Args {
		if !keep[i] {
			z.standIn(r.Args[i])
		}
	}
	v, err := resp.Parse(r.Reply)
	if err != nil {
		r.Reply, r.Flags = []byte(unparsed), r.Flags|FlagShapeOnly
		return
	}
	if z.standInValue(&v, false) { // in r.Reply itself
		r.Flags |= FlagShapeOnly
	}
}

// keepArgs marks the arguments of a plain command kept in clear.
func (z *redactor) keepArgs(r *Record) []bool {
	z.keep = append(z.keep[:0], make([]bool, len(r.Args))...)
	keep := z.keep
	if len(r.Args) == 0 {
		return keep
	}
	for i := range min(max(r.name, 1), len(r.Args)) {
		keep[i] = true
	}
	if r.keysSet {
		for _, k := range r.keys {
			if k >= 0 && k < len(keep) {
				keep[k] = true
			}
		}
	} else {
		prefix := "emq:{" + r.Queue + "}"
		for i, a := range r.Args {
			if i > 0 && bytes.HasPrefix(a, []byte(prefix)) {
				keep[i] = true
			}
		}
	}
	name := strings.ToUpper(string(r.Args[0]))
	switch k := rewrite.ScriptKindOf(r.Args[0]); {
	case k == rewrite.NotScript:
	case k.Body():
		keepAt(keep, 2) // numkeys; the body may hold anything
	default:
		keepAt(keep, 1, 2) // the sha or function name, numkeys
	}
	if len(r.Args) > 2 && bytes.HasPrefix(r.Args[1], []byte("emq:{"+r.Queue+"}:job:")) {
		keepRowFields(keep, name, r.Args)
	}
	return keep
}

func keepAt(keep []bool, at ...int) {
	for _, i := range at {
		if i < len(keep) {
			keep[i] = true
		}
	}
}

// keepRowFields marks, in a hash command on a job row, the field names of
// the job-core contract, and the values of its structural fields.
func keepRowFields(keep []bool, name string, args [][]byte) {
	switch name {
	case "HSET", "HMSET", "HSETNX":
		for i := 2; i+1 < len(args); i += 2 {
			if rowField(args[i]) {
				keep[i] = true
				keep[i+1] = structuralField(args[i])
			}
		}
	case "HINCRBY", "HINCRBYFLOAT":
		if len(args) > 3 && rowField(args[2]) {
			keep[2], keep[3] = true, structuralField(args[2])
		}
	case "HGET", "HMGET", "HDEL", "HEXISTS", "HSTRLEN":
		for i := 2; i < len(args); i++ {
			keep[i] = rowField(args[i])
		}
	}
}

// rowField reports whether f is a field of the contract's job row.
func rowField(f []byte) bool {
	switch string(f) {
	case "state", "attempts", "payload", "error", "lease_epoch":
		return true
	}
	return false
}

// structuralField reports whether a job row field holds structure (a state
// word or a count), not the application's data.
func structuralField(f []byte) bool {
	switch string(f) {
	case "state", "attempts", "lease_epoch":
		return true
	}
	return false
}

// standInValue replaces the contents of v (errorsOnly: of its errors only)
// by stand-ins, in the reply v was parsed from (a stand-in has its value's
// length, so the reply keeps its framing), and reports whether it changed
// anything. Simple strings,
// integers, booleans and nulls are kept: they are statuses and counts.
func (z *redactor) standInValue(v *resp.Value, errorsOnly bool) bool {
	changed := false
	switch v.Type {
	case '-', '!':
		if _, text := errorCode(v.Str); len(text) > 0 {
			z.standIn(text)
			changed = true
		}
	case '$', ',', '(':
		if !errorsOnly && !v.Nil && len(v.Str) > 0 {
			z.standIn(v.Str)
			changed = true
		}
	case '=':
		// Verbatim: the three-letter format and its colon stay.
		if !errorsOnly && len(v.Str) > 4 {
			z.standIn(v.Str[4:])
			changed = true
		}
	}
	for i := range v.Elems {
		changed = z.standInValue(&v.Elems[i], errorsOnly) || changed
	}
	return changed
}

// errorCode splits an error text into its code (the first word and its
// space, when the word is an upper case letter, then upper case letters,
// digits, '_' or '-') and the rest.
func errorCode(s []byte) (code, text []byte) {
	if len(s) == 0 || s[0] < 'A' || s[0] > 'Z' {
		return nil, s
	}
	i := 1
	for i < len(s) && (s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '-') {
		i++
	}
	switch {
	case i == len(s):
		return s, nil
	case s[i] == ' ':
		return s[:i+1], s[i+1:]
	}
	return nil, s
}
