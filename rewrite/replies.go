package rewrite

import (
	"strings"

	"github.com/emqproxy/emqproxy/resp"
)

// VersionKey is the key whose value brands a node (job-core.md, "Brands and
// the version key"). For wire-4 sessions it belongs to the proxy.
const VersionKey = "{emq}:version"

// ControlKeyPrefix starts every key of the control table (package control),
// all in the one slot of its hash tag. Clients may not write such keys
// (proxy/plan refuses them); the control package builds its key names on it.
const ControlKeyPrefix = "{emqproxy}"

// DefaultServerVersion is the version HELLO reports when Policy.ServerVersion
// is empty: the server the proxy's replies are modelled on.
const DefaultServerVersion = "7.0.15"

// Replies the proxy answers itself, byte for byte as redis 7.0 does.
var (
	replyOK       = []byte("+OK\r\n")
	replyPong     = []byte("+PONG\r\n")
	replyReset    = []byte("+RESET\r\n")
	replyNil      = []byte("$-1\r\n")
	replyNilArray = []byte("*-1\r\n")
	replyNull     = []byte("_\r\n") // RESP3
	replyString   = []byte("+string\r\n")
	replyMinus1   = []byte(":-1\r\n")
	replyNoAuth   = []byte("-NOAUTH Authentication required.\r\n")
	replyHelloNA  = []byte("-NOAUTH HELLO must be called with the client already authenticated, " +
		"otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client " +
		"and select the RESP protocol version at the same time\r\n")
	replyWrongPass = []byte("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
	replyNoPass    = []byte("-ERR AUTH <password> called without any password configured for " +
		"the default user. Are you sure your configuration is correct?\r\n")
	replySyntax            = []byte("-ERR syntax error\r\n")
	replyNotInt            = []byte("-ERR value is not an integer or out of range\r\n")
	replyProtoNotInt       = []byte("-ERR Protocol version is not an integer or out of range\r\n")
	replyNoProto           = []byte("-NOPROTO unsupported protocol version\r\n")
	replyTrackingRedirect3 = []byte("-EMQREFUSED emqproxy does not bridge CLIENT TRACKING REDIRECT for RESP3 clients: " +
		"leave REDIRECT out, the invalidations are pushed on the client's own connection\r\n")
	replyHelloWatch    = []byte("-ERR emqproxy: HELLO cannot switch the protocol while WATCH is active; UNWATCH first\r\n")
	replyHelloTracking = []byte("-ERR emqproxy: HELLO cannot switch a RESP2 client that tracks (CLIENT TRACKING) to RESP3; CLIENT TRACKING off first\r\n")
	replyBadName       = []byte("-ERR Client names cannot contain spaces, newlines or special characters.\r\n")
	replyNegKeys       = []byte("-ERR Number of keys can't be negative\r\n")
	replyManyKeys      = []byte("-ERR Number of keys can't be greater than number of args\r\n")
	replyNested        = []byte("-ERR MULTI calls can not be nested\r\n")
	replyExecNoMulti   = []byte("-ERR EXEC without MULTI\r\n")
	replyDiscNoMulti   = []byte("-ERR DISCARD without MULTI\r\n")
	replyWatchMulti    = []byte("-ERR WATCH inside MULTI is not allowed\r\n")
	replyExecAbort     = []byte("-EXECABORT Transaction discarded because of previous errors.\r\n")
	replyExecArity     = []byte("-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n")
	replyEmpty         = []byte("-ERR Protocol error: empty command\r\n")

	// The proxy's own refusals of the version key.
	replyNotFenced    = []byte("-FENCE upstream is not fenced; " + VersionKey + " is unavailable\r\n")
	replyVersionWrite = []byte("-FENCE " + VersionKey + " belongs to emqproxy; write refused\r\n")
)

// errReply builds "-<text>\r\n". Like the server, it turns CR and LF in
// the text (which may quote client input) into spaces, so the reply stays
// one line.
func errReply(text string) []byte {
	b := make([]byte, 0, len(text)+3)
	b = append(b, '-')
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

// arityReply is the server's wrong-arity text; name is the lower-case
// command name, "parent|sub" for a subcommand.
func arityReply(name string) []byte {
	return errReply("ERR wrong number of arguments for '" + name + "' command")
}

// bulkReply is b as a RESP bulk string.
func bulkReply(b []byte) []byte { return resp.AppendBulk(make([]byte, 0, len(b)+16), b) }

// verbatimReply is b as a RESP3 verbatim string of format "txt".
func verbatimReply(b []byte) []byte { return resp.AppendVerbatim(make([]byte, 0, len(b)+24), b) }

// refuse is a refusal decision.
func refuse(reply []byte, r Reason) Decision {
	return Decision{Action: Refuse, Reply: reply, Reason: r}
}

// local is a locally answered decision.
func local(reply []byte, e Effect) Decision {
	return Decision{Action: Local, Reply: reply, Effect: e}
}

// cmdLabel is the name a refusal quotes: "NAME" or, for a command with
// subcommands, "NAME SUB" (both upper case).
func cmdLabel(up []byte, args [][]byte, info cmdInfo) string {
	name := string(up)
	if up == nil {
		name = strings.ToUpper(string(args[0]))
	}
	if info.flags&fSub != 0 && len(args) > 1 && len(args[1]) <= maxName {
		var buf [maxName]byte
		name += " " + string(upperInto(buf[:0], args[1]))
	}
	return name
}
