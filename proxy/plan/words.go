package plan

import "github.com/emqproxy/emqproxy/rewrite"

// isScriptCall reports whether name is EVAL, EVALSHA, EVAL_RO or EVALSHA_RO.
func isScriptCall(name []byte) bool {
	return rewrite.EqualFold(name, "EVALSHA") || rewrite.EqualFold(name, "EVAL") || rewrite.EqualFold(name, "EVALSHA_RO") || rewrite.EqualFold(name, "EVAL_RO")
}

// cmdName is the command's name in upper case for an error text (cut to 32
// bytes, printable only).
func cmdName(args [][]byte) string {
	if len(args) == 0 {
		return ""
	}
	n := args[0]
	if len(n) > 32 {
		n = n[:32]
	}
	out := make([]byte, 0, len(n))
	for _, c := range n {
		switch {
		case 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case c < ' ' || c > '~' || c == '\'':
			c = '?'
		}
		out = append(out, c)
	}
	return string(out)
}
