package plan

import (
	"strconv"
	"strings"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The shared-connection rule.
//
// Many clients share a few upstream connections, so a command may travel
// on one only when the server's own command table (COMMAND, read from each
// upstream into package cmdtable, which classes each entry) shows that it
// gets exactly one reply and leaves the connection, the node, its
// credentials and its other databases as every other client expects them. rewrite.Decide has decided the command first
// (its deny list, the version key for wire-4 sessions, scripts, local
// answers); the rule then applies, in Decide, to every command Decide would
// forward, in every session mode, on whatever connection it goes: it reads
// the server's table, which only the proxy has, and rewrite/ stays pure.
//
// In order:
//
//  1. Protected keys, always: no command writes the version key
//     ({emq}:version) or a control-table key ({emqproxy}...), whatever the
//     session's protocol or wire. A key is written when the server's key
//     spec for its position says so (RW, OW or RM, or not RO); a command
//     whose specs the server leaves open (SORT's STORE, MIGRATE) and that
//     the table flags write is refused when any argument is such a key;
//     a script call (EVAL, EVALSHA and their _RO forms) naming one among
//     its keys is refused. Reads pass: a wire-6 session reads the true key.
//  2. The class of the command's table entry (its subcommand's for a
//     container), each named in the refusal:
//     - reply, never opened: the server does not answer with exactly one
//     reply (cmdtable's replyShape, and the subscribe family, flagged pubsub
//     and noscript, outside the subscribe paths that bridge it);
//     - secret, never opened: the command answers credentials (ACL LIST,
//     ACL GETUSER);
//     - blocking, never opened: flagged blocking, yet it would go on a
//     shared connection (not decided Blocking and not inside MULTI,
//     where the server never blocks);
//     - admin (flag admin or category @admin), dangerous (@dangerous) and
//     noscript (the server refuses it in scripts because it acts on the
//     connection it runs on, which other clients share): refused unless
//     policy.allow names the command or its container.
//     The exceptions clients use are in cmdtable's ruleExceptions
//     (cmdtable/class.go), each with its reason.
//  3. Argument checks, always: CONFIG GET names parameters one by one and
//     none that holds a credential; MOVE, COPY ... DB and MIGRATE name the
//     configured database only; SWAPDB and FLUSHALL, which touch every
//     database, are refused.
//
// A command the table does not know passes: the server answers its own
// unknown-command error, one reply. With no table loaded yet no upstream
// connection exists, and the command gets the default upstream's
// unavailable error.

// ruleReason is the refusal reason of a class (audit log, metrics).
func ruleReason(class string) rewrite.Reason { return rewrite.Reason("rule_" + class) }

// ReasonControlKey is the refusal reason of a write to a control-table key.
const ReasonControlKey rewrite.Reason = "control_key"

// Rule refuses a command Decide would forward when it is outside the
// rule (see above), under the view's policy and command tables. Inside
// MULTI the refusal discards the transaction. It returns the command's
// entry in the server's table (nil when it has none or is refused), which
// the plan keeps for what else reads it.
func Rule(args [][]byte, d *rewrite.Decision, inMulti bool, v *View) *cmdtable.Entry {
	if d.Action != rewrite.Pass && d.Action != rewrite.Rewrite {
		return nil
	}
	x := v.Tables.Index()
	if x == nil {
		*d = rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonProtocol,
			Reply: v.Routes.def.Unavailable()}
		if inMulti {
			d.Effect = rewrite.AbortMulti
		}
		return nil
	}
	ck := x.Lookup(args)
	if key, ok := protectedWrite(args, ck, d); ok {
		reason := ReasonControlKey
		if string(key) == rewrite.VersionKey {
			reason = rewrite.ReasonVersionKey
		}
		refuseWith(d, clienterr.Fence, printable(key)+" belongs to emqproxy; write refused", reason, inMulti)
		return nil
	}
	if ck == nil {
		return nil
	}
	class := ck.Class
	switch {
	case class == cmdtable.ClassReply && (d.Effect == rewrite.Subscribe || unsubscribe(args)),
		class == cmdtable.ClassNoscript && d.Effect == rewrite.Subscribe,
		class == cmdtable.ClassBlocking && (d.Effect == rewrite.Blocking || inMulti),
		class.Openable() && (v.Pol.Allow[ck.Label] || (ck.Parent != "" && v.Pol.Allow[ck.Parent])):
		class = cmdtable.ClassOpen
	}
	if class != cmdtable.ClassOpen {
		refuseWith(d, clienterr.Refused, "emqproxy does not forward '"+ck.Label+"': shared-connection rule "+
			class.String()+": "+class.Why(ck), ruleReason(class.String()), inMulti)
		return nil
	}
	if why := argumentCheck(args, ck, v.Pol.DB); why != "" {
		class := "database"
		if ck.Name == "config|get" {
			class = "secret"
		}
		refuseWith(d, clienterr.Refused, "emqproxy does not forward '"+ck.Label+"': shared-connection rule "+
			class+": "+why, ruleReason(class), inMulti)
	}
	return ck
}

// unsubscribe reports whether args is the unsubscribe family's. Decide
// answers it itself outside subscribe mode, with or without channels; it
// passes it only for a subscribed RESP3 client queuing it in MULTI
// (rewrite.State.Subscribed), sent with EXEC on the client's own
// connection, never a shared one.
func unsubscribe(args [][]byte) bool {
	return rewrite.EqualFold(args[0], "UNSUBSCRIBE") || rewrite.EqualFold(args[0], "PUNSUBSCRIBE") || rewrite.EqualFold(args[0], "SUNSUBSCRIBE")
}

// argumentCheck is the rule's check of the arguments of a command that is
// normally fine but not with every option: "" when it passes, else why.
func argumentCheck(args [][]byte, ck *cmdtable.Entry, db int) string {
	switch strings.ToLower(ck.Name) {
	case "config|get":
		for _, a := range args[2:] {
			if why := credentialParam(a); why != "" {
				return why
			}
		}
	case "move":
		if len(args) == 3 {
			return otherDB(args[2], db)
		}
	case "copy":
		for i := 3; i+1 < len(args); i++ {
			if rewrite.EqualFold(args[i], "DB") {
				if why := otherDB(args[i+1], db); why != "" {
					return why
				}
				i++
			}
		}
	case "migrate":
		if len(args) > 4 {
			return otherDB(args[4], db)
		}
	case "swapdb", "flushall":
		return "it touches every database of the node; this proxy serves database " + strconv.Itoa(db) + " only"
	}
	return ""
}

// otherDB is why a database argument is refused: it names a database other
// than db. A value that is not an integer passes (the server refuses it).
func otherDB(a []byte, db int) string {
	n, ok := resp.ParseInt(a)
	if !ok || n == int64(db) {
		return ""
	}
	return "it names database " + strconv.FormatInt(n, 10) + "; this proxy serves database " + strconv.Itoa(db) + " only"
}

// credentialParam is why a CONFIG GET argument is refused: a glob pattern
// (it may match a parameter that holds a credential), or a parameter that
// holds one (its name has "pass" or "auth" in it, or it names the user
// replication authenticates as). "" when it passes.
func credentialParam(a []byte) string {
	name := strings.ToLower(string(a))
	switch {
	case strings.ContainsAny(name, "*?[\\"):
		return "a pattern may match a parameter that holds a credential; name the parameters one by one"
	case strings.Contains(name, "pass"), strings.Contains(name, "auth"),
		name == "masteruser", name == "primaryuser":
		return "parameter '" + printable(a) + "' holds a credential of the node"
	}
	return ""
}

// protectedWrite returns the first protected key (the version key, or a
// control-table key) that the command writes; see the rule above. A script
// call's keys are Decide's (d.Keys).
func protectedWrite(args [][]byte, ck *cmdtable.Entry, d *rewrite.Decision) ([]byte, bool) {
	first := -1
	for i := 1; i < len(args); i++ {
		if isProtected(args[i]) {
			first = i
			break
		}
	}
	if first < 0 {
		return nil, false
	}
	if isScriptCall(args) {
		for _, k := range d.Keys { // nil: the server refuses the numkeys
			if isProtected(k) {
				return k, true
			}
		}
		return nil, false
	}
	if ck == nil {
		return nil, false
	}
	if ck.Ask && ck.Traits&cmdtable.TraitWrite != 0 {
		return args[first], true
	}
	var buf [8]int
	for i := range ck.Specs {
		sp := &ck.Specs[i]
		if !sp.Write || sp.NotKey {
			continue
		}
		for _, at := range sp.Positions(args, buf[:0]) {
			if isProtected(args[at]) {
				return args[at], true
			}
		}
	}
	return nil, false
}

// isProtected reports whether key is the version key or a control-table key.
func isProtected(key []byte) bool {
	if len(key) < len(rewrite.ControlKeyPrefix)-2 || key[0] != '{' {
		return false
	}
	return string(key) == rewrite.VersionKey || strings.HasPrefix(string(key), rewrite.ControlKeyPrefix)
}

// printable is b for an error text: cut to 64 bytes, bytes that are not
// printable ASCII (and quotes) as '?'.
func printable(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c < ' ' || c > '~' || c == '\'' {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}
