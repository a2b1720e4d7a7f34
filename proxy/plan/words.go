package plan

// isScriptCall reports whether name is EVAL, EVALSHA, EVAL_RO or EVALSHA_RO.
func isScriptCall(name []byte) bool {
	return foldEq(name, "EVALSHA") || foldEq(name, "EVAL") || foldEq(name, "EVALSHA_RO") || foldEq(name, "EVAL_RO")
}

// foldEq reports whether b equals the upper-case ASCII s, ignoring case.
func foldEq(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
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
