package cmdtable

import (
	"strings"

	"github.com/emqproxy/emqproxy/fence"
)

// The classes of the shared-connection rule, computed from the server's
// flags and ACL categories when an entry is parsed: which commands may
// travel on a connection other clients share (the rule itself, its order
// and its argument checks, is the proxy's: proxy/plan/rule.go).

// Traits are what the shared-connection rule reads of a command's flags
// and ACL categories.
type Traits uint8

const (
	TraitWrite     Traits = 1 << iota // flag write
	TraitAdmin                        // flag admin, or category @admin
	TraitDangerous                    // category @dangerous
	TraitNoscript                     // flag noscript
	TraitBlocking                     // flag blocking
	TraitPubsub                       // flag pubsub
)

// parseTraits reads a COMMAND entry's flags and ACL categories.
func parseTraits(flags, cats fence.Reply) Traits {
	var t Traits
	for _, f := range flags.Elems {
		switch strings.ToLower(f.Str) {
		case "write":
			t |= TraitWrite
		case "admin":
			t |= TraitAdmin
		case "noscript":
			t |= TraitNoscript
		case "blocking":
			t |= TraitBlocking
		case "pubsub":
			t |= TraitPubsub
		}
	}
	for _, c := range cats.Elems {
		switch strings.ToLower(c.Str) {
		case "@admin":
			t |= TraitAdmin
		case "@dangerous":
			t |= TraitDangerous
		}
	}
	return t
}

// Class is where the rule puts a command's table entry.
type Class uint8

// The classes; open travels, the others are refused (proxy/plan/rule.go says
// when each opens).
const (
	ClassOpen Class = iota
	ClassReply
	ClassSecret
	ClassBlocking
	ClassAdmin
	ClassDangerous
	ClassNoscript
)

// String is the class's name, as refusals, reasons and the README give it.
func (c Class) String() string {
	switch c {
	case ClassReply:
		return "reply"
	case ClassSecret:
		return "secret"
	case ClassBlocking:
		return "blocking"
	case ClassAdmin:
		return "admin"
	case ClassDangerous:
		return "dangerous"
	case ClassNoscript:
		return "noscript"
	}
	return "open"
}

// Openable reports whether policy.allow can open the class.
func (c Class) Openable() bool {
	return c == ClassAdmin || c == ClassDangerous || c == ClassNoscript
}

// replyShape lists the commands (the server's lower-case names) whose
// reply count is not one, with why. The table has no flag for it; these
// are the server's own special cases.
var replyShape = map[string]string{
	"replconf":     "the server answers REPLCONF ACK and GETACK with nothing",
	"monitor":      "after its +OK the connection streams every command the node runs",
	"sync":         "the connection becomes a replication stream",
	"psync":        "the connection becomes a replication stream",
	"client|reply": "OFF and SKIP silence the replies that follow",
}

// secretCommands answer credentials of the node, with why.
var secretCommands = map[string]string{
	"acl|list":    "it answers every user's password hashes",
	"acl|getuser": "it answers the user's password hashes",
}

// ruleExceptions are the commands the classes would refuse that clients
// use and that are safe, with the reason (the README's table repeats it).
var ruleExceptions = map[string]string{
	"info":           "@dangerous: ioredis sends it on every connect (its ready check) and clients read the server's version from it; it shows no credential and changes nothing",
	"keys":           "@dangerous for its cost alone: one reply, the configured database only",
	"sort":           "@dangerous for its cost alone: one reply; SORT ... STORE is a write, under the protected-key check",
	"sort_ro":        "@dangerous for its cost alone: one reply, a read",
	"config|get":     "@admin: job clients check maxmemory-policy at start; only parameters named one by one and holding no credential pass (the secret check)",
	"client|caching": "noscript: meaningful only on a tracking connection, which is the client's own; a shared connection never tracks, so the server refuses it there",
	"eval":           "noscript: the script rule decides it (rewrite/scripts.go)",
	"evalsha":        "noscript: the script rule decides it (rewrite/scripts.go)",
	"eval_ro":        "noscript: the script rule decides it (rewrite/scripts.go)",
	"evalsha_ro":     "noscript: the script rule decides it (rewrite/scripts.go)",
	"script|load":    "noscript: the script rule decides it (rewrite/scripts.go)",
	"script|exists":  "noscript: the script rule decides it (rewrite/scripts.go)",
	"watch":          "noscript: WATCH pins a connection of the client's own",
	"exec":           "noscript: EXEC sends MULTI, the checked queued commands and EXEC as one unit",
	"unwatch":        "noscript: no watch is ever set on a shared connection, so it changes nothing there",
	"wait":           "noscript: it blocks, so it goes on a connection of its own; inside MULTI the server answers at once",
	"waitaof":        "noscript: it blocks, so it goes on a connection of its own; inside MULTI the server answers at once",
	"xread":          "blocking only with BLOCK, which goes on a connection of its own",
	"xreadgroup":     "blocking only with BLOCK, which goes on a connection of its own",
}

// classify puts a table entry (lower-case name, "container|sub" for a
// subcommand) in its class.
func classify(name string, t Traits) Class {
	if _, ok := replyShape[name]; ok || (t&TraitPubsub != 0 && t&TraitNoscript != 0) {
		return ClassReply
	}
	if _, ok := secretCommands[name]; ok {
		return ClassSecret
	}
	if _, ok := ruleExceptions[name]; ok {
		return ClassOpen
	}
	switch {
	case t&TraitBlocking != 0:
		return ClassBlocking
	case t&TraitAdmin != 0:
		return ClassAdmin
	case t&TraitDangerous != 0:
		return ClassDangerous
	case t&TraitNoscript != 0:
		return ClassNoscript
	}
	return ClassOpen
}

// label is a table name as refusals and policy.allow spell it: upper
// case, "CONFIG GET" for "config|get".
func label(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "|", " "))
}

// Why is the refusal's explanation for the class of ck.
func (c Class) Why(ck *Entry) string {
	switch c {
	case ClassReply:
		if why, ok := replyShape[strings.ToLower(ck.Name)]; ok {
			return "the server does not answer it with exactly one reply (" + why + ")"
		}
		return "the server answers it with one reply per channel"
	case ClassSecret:
		return secretCommands[strings.ToLower(ck.Name)]
	case ClassBlocking:
		return "it may block, and it would go on a shared connection"
	case ClassNoscript:
		return "the server's command table flags it noscript: it acts on the connection it runs on, " +
			"which other clients share (policy.allow opens it)"
	}
	return "the server's command table puts it in @" + c.String() + " (policy.allow opens it)"
}
