package plan

import "github.com/emqproxy/emqproxy/rewrite"

// isScriptCall reports whether args is a script call as rewrite.Decide
// reads one (rewrite.ScriptKind.Eval): its keys are the decision's
// (Decision.Keys), not the server's command table's.
func isScriptCall(args [][]byte) bool { return rewrite.ScriptKindOf(args[0]).Eval() }

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
