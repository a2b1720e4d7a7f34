package tracking

import (
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// OnOff reports whether args is CLIENT TRACKING ON or OFF (ok), and which
// (on). The RESP3 bridge and subscribe mode read it too: a subscribed or
// bridged client's CLIENT TRACKING goes to its legs as it is.
func OnOff(args [][]byte) (on, ok bool) {
	if len(args) < 3 || !rewrite.EqualFold(args[0], "CLIENT") || !rewrite.EqualFold(args[1], "TRACKING") {
		return false, false
	}
	switch {
	case rewrite.EqualFold(args[2], "ON"):
		return true, true
	case rewrite.EqualFold(args[2], "OFF"):
		return false, true
	}
	return false, false
}

// IsCaching reports whether args is CLIENT CACHING ...
func IsCaching(args [][]byte) bool {
	return len(args) >= 2 && rewrite.EqualFold(args[0], "CLIENT") && rewrite.EqualFold(args[1], "CACHING")
}

// redirect finds the value of CLIENT TRACKING's first REDIRECT, as the
// server reads the options (REDIRECT and PREFIX take a value): its index
// (0: none) and the session it names (0: not a positive integer, which the
// server refuses as it is).
func redirect(args [][]byte) (at int, target uint64) {
	for j := 3; j+1 < len(args); j++ {
		switch {
		case rewrite.EqualFold(args[j], "REDIRECT"):
			v, ok := resp.ParseInt(args[j+1])
			if !ok || v <= 0 {
				return 0, 0
			}
			return j + 1, uint64(v)
		case rewrite.EqualFold(args[j], "PREFIX"):
			j++
		}
	}
	return 0, 0
}

// bcast reports whether CLIENT TRACKING names BCAST.
func bcast(args [][]byte) bool {
	for j := 3; j < len(args); j++ {
		switch {
		case rewrite.EqualFold(args[j], "BCAST"):
			return true
		case (rewrite.EqualFold(args[j], "PREFIX") || rewrite.EqualFold(args[j], "REDIRECT")) && j+1 < len(args):
			j++
		}
	}
	return false
}
