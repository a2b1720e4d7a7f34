package rewrite

// DefaultDeny is the deny list used when Policy.Deny is nil: proxy.md's
// default list, plus CLIENT KILL and CLIENT PAUSE/UNPAUSE, which would act
// on the proxy's shared upstream connections or stall every client. Entries
// are upper case, a command ("FLUSHALL") or a command and subcommand
// ("CONFIG SET"). It must not be modified; build a new map to change it.
var DefaultDeny = map[string]bool{
	"MODULE":           true,
	"CONFIG SET":       true,
	"CONFIG REWRITE":   true,
	"CONFIG RESETSTAT": true,
	"DEBUG":            true,
	"SHUTDOWN":         true,
	"FLUSHALL":         true,
	"FLUSHDB":          true,
	"REPLICAOF":        true,
	"SLAVEOF":          true,
	"FAILOVER":         true,
	"MIGRATE":          true,
	"ACL SETUSER":      true,
	"ACL DELUSER":      true,
	"ACL LOAD":         true,
	"ACL SAVE":         true,
	"MONITOR":          true,
	"SYNC":             true,
	"PSYNC":            true,
	"SCRIPT FLUSH":     true,
	"SCRIPT KILL":      true,
	"EMQ.INSTALL":      true,
	"FUNCTION LOAD":    true,
	"FUNCTION DELETE":  true,
	"FUNCTION FLUSH":   true,
	"FUNCTION RESTORE": true,
	"FUNCTION KILL":    true,
	"FCALL":            true,
	"CLIENT KILL":      true,
	"CLIENT PAUSE":     true,
	"CLIENT UNPAUSE":   true,
}

// maxDenyKey bounds the "NAME SUB" lookup key; longer ones match nothing
// in practice and are not looked up.
const maxDenyKey = 2*maxName + 1

// denied reports whether the command is on the deny list, and the entry
// that matched; an entry Policy.Allow names (or names the command of, for
// a "NAME SUB" entry) does not count. It does not allocate unless the
// command is denied.
func denied(args [][]byte, up []byte, info cmdInfo, known bool, p *Policy) (string, bool) {
	deny := p.Deny
	if deny == nil {
		if known && info.flags&(fSub|fDefaultDeny) == 0 {
			return "", false // DefaultDeny names neither it nor a subcommand of it
		}
		deny = DefaultDeny
	}
	if len(deny) == 0 {
		return "", false
	}
	var buf [maxDenyKey]byte
	var key []byte
	if up != nil {
		key = append(buf[:0], up...)
	} else if len(args[0]) <= maxDenyKey {
		key = upperInto(buf[:0], args[0])
	} else {
		return "", false
	}
	name := len(key)
	if deny[string(key)] && !p.Allow[string(key)] {
		return string(key), true
	}
	if (info.flags&fSub == 0 && known) || len(args) < 2 || len(key)+1+len(args[1]) > maxDenyKey {
		return "", false
	}
	key = append(key, ' ')
	key = upperInto(key, args[1])
	if deny[string(key)] && !p.Allow[string(key)] && !p.Allow[string(key[:name])] {
		return string(key), true
	}
	return "", false
}
