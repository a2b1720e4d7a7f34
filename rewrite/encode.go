package rewrite

import (
	"errors"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/shamap"
)

// AppendRewritten appends to dst the RESP encoding of the command a Rewrite
// decision sends: an array header, Head as a bulk string, then
// args[d.Replace:] as bulk strings, byte for byte. It is the reference
// encoding of a rewritten command.
func AppendRewritten(dst []byte, args [][]byte, d Decision) []byte {
	tail := args[min(d.Replace, len(args)):]
	dst = resp.AppendArray(dst, 1+len(tail))
	dst = resp.AppendBulkString(dst, d.Head)
	for _, a := range tail {
		dst = resp.AppendBulk(dst, a)
	}
	return dst
}

// ErrReply is returned by PatchScriptExists for a reply that is not an
// array of integers (an error reply is returned unchanged, without error).
var ErrReply = errors.New("rewrite: unexpected SCRIPT EXISTS reply")

// PatchScriptExists rewrites the upstream's reply to a SCRIPT EXISTS that
// Decide passed with Effect ScriptExists: the entry of every verb sha
// becomes 1, because verb scripts are never loaded upstream. args is the
// client's command; an error reply is returned as it is.
func PatchScriptExists(reply []byte, args [][]byte, m *shamap.Map) ([]byte, error) {
	if len(reply) > 0 && reply[0] == '-' {
		return reply, nil
	}
	if len(args) < 3 {
		return nil, ErrReply
	}
	shas := args[2:]
	out := resp.AppendArray(make([]byte, 0, len(reply)), len(shas))
	rest, ok := cutLine(reply)
	if !ok || len(rest.line) < 2 || rest.line[0] != '*' {
		return nil, ErrReply
	}
	n, ok := resp.ParseInt(rest.line[1:])
	if !ok || n != int64(len(shas)) {
		return nil, ErrReply
	}
	b := rest.after
	for _, sha := range shas {
		r, ok := cutLine(b)
		if !ok || len(r.line) < 2 || r.line[0] != ':' {
			return nil, ErrReply
		}
		b = r.after
		if m != nil {
			if s, found := m.Lookup(sha); found && s.Verb != "" {
				out = append(out, ":1\r\n"...)
				continue
			}
		}
		out = append(out, r.line...)
		out = append(out, '\r', '\n')
	}
	if len(b) != 0 {
		return nil, ErrReply
	}
	return out, nil
}

// cut is one CRLF-terminated line and what follows it.
type cut struct{ line, after []byte }

// cutLine splits b at its first CRLF.
func cutLine(b []byte) (cut, bool) {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\r' && b[i+1] == '\n' {
			return cut{b[:i], b[i+2:]}, true
		}
	}
	return cut{}, false
}
