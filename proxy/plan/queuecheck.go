package plan

import (
	"bytes"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Queue-time errors inside MULTI.
//
// The proxy queues a transaction itself and sends it at EXEC, so a command
// it queued got +QUEUED from the proxy, not from the server. The server,
// though, checks every command before queueing it (Redis 7 processCommand):
// an unknown command or subcommand, a wrong number of arguments, a command
// flagged no-multi are answered with an error there and then, and the
// transaction is flagged so that EXEC answers EXECABORT. The proxy makes
// the same checks, from the upstreams' own command tables (COMMAND, read
// when the first connection of each upstream passes the fence: package
// cmdtable), with the server's texts, and refuses such a command with
// AbortMulti: EXEC then answers EXECABORT locally, as the server would, and
// nothing of the transaction is sent.
//
// The checks are in the plan, not in rewrite/: rewrite/ decides from the
// command alone, with a fixed table of the commands it treats specially;
// the server's table is data read at run time, per upstream, and only the
// proxy has it. They apply to the commands rewrite/ would have queued
// (Pass or Rewrite); rewrite/'s own refusals inside MULTI (a denied
// command, a nested MULTI, WATCH inside MULTI, ...) stay as they are.
//
// Not reproduced: the checks the server makes between the arity and
// no-multi checks that depend on the upstream connection rather than the
// command (ACL permissions of the proxy's upstream user, OOM, a replica's
// read-only state, ...). Such a command gets +QUEUED, is sent at EXEC, and
// the server's EXECABORT or error is what the client then gets.

// Reasons of the queue-time refusals (audit log, metrics); arity errors
// use rewrite.ReasonArity.
const (
	ReasonUnknownCommand rewrite.Reason = "unknown_command"
	ReasonNoMulti        rewrite.Reason = "no_multi"
)

// replyNoMulti is the server's text for a no-multi command inside MULTI.
var replyNoMulti = clienterr.Reply(clienterr.New(clienterr.Err, "Command not allowed inside a transaction"))

// queueCheck turns a decision that would queue args inside MULTI into the
// refusal the server answers at queue time, if the server's command table
// says it would refuse it. The table not loaded yet (no upstream
// connection has passed the fence) means no check: the command is queued
// and EXEC gets the server's own EXECABORT, as before the table existed.
func queueCheck(ks *cmdtable.Store, args [][]byte, d *rewrite.Decision) {
	// rewrite/ answers a nested MULTI as Redis 7.0 does; a server whose
	// table flags MULTI no-multi (Valkey 8) refuses it as such instead, and
	// discards the transaction.
	nested := d.Action == rewrite.Refuse && d.Effect == rewrite.NoEffect && len(args) == 1 && rewrite.EqualFold(args[0], "MULTI")
	if !nested && ((d.Action != rewrite.Pass && d.Action != rewrite.Rewrite) || !Queueable(d)) {
		return
	}
	reply, reason := queueError(ks, args)
	if reply == nil || (nested && reason != ReasonNoMulti) {
		return
	}
	*d = rewrite.Decision{
		Action: rewrite.Refuse,
		Effect: rewrite.AbortMulti,
		Reason: reason,
		Reply:  reply,
		Script: d.Script,
		SHA:    d.SHA,
		Queue:  d.Queue,
	}
}

// queueError returns the error the server answers when args is sent inside
// MULTI, in the order the server checks (command, subcommand, arity,
// no-multi), or nil when it would queue it or no table is loaded.
func queueError(ks *cmdtable.Store, args [][]byte) ([]byte, rewrite.Reason) {
	c, reply, reason := entry(ks, args)
	if reply == nil && c != nil && c.NoMulti {
		return replyNoMulti, ReasonNoMulti
	}
	return reply, reason
}

// commandError is the server's error for a command it does not know, or
// calls with the wrong number of arguments: the checks the server makes
// before any other, authentication included (Redis 7 processCommand).
func commandError(ks *cmdtable.Store, args [][]byte) ([]byte, rewrite.Reason) {
	_, reply, reason := entry(ks, args)
	return reply, reason
}

// entry looks args up in the table: its entry (its subcommand's, for a
// container with an argument), or the server's error for an unknown
// command or subcommand or a wrong number of arguments. Nothing when the
// table is not loaded.
func entry(ks *cmdtable.Store, args [][]byte) (*cmdtable.Entry, []byte, rewrite.Reason) {
	t := ks.Table()
	if t == nil || len(args) == 0 {
		return nil, nil, ""
	}
	var buf [cmdtable.MaxName]byte
	c := t[string(rewrite.LowerInto(buf[:0], args[0]))]
	if c == nil {
		return nil, unknownCommand(args), ReasonUnknownCommand
	}
	// A container command alone is checked as itself (its arity); with an
	// argument, that argument must be one of its subcommands.
	if c.Subs != nil && len(args) > 1 {
		sc := c.Subs[string(rewrite.LowerInto(buf[:0], args[1]))]
		if sc == nil {
			return nil, unknownSubcommand(args), ReasonUnknownCommand
		}
		c = sc
	}
	if argc := len(args); (c.Arity > 0 && c.Arity != argc) || argc < -c.Arity {
		return c, serverError("wrong number of arguments for '" + c.Name + "' command"), rewrite.ReasonArity
	}
	return c, nil, ""
}

// unknownCommand is the server's text for an unknown command: the name, and
// the arguments quoted while the list is shorter than 128 bytes, the last
// one cut so that it ends at 128 (Redis 7 processCommand's
// "'%.*s' " with 128-sdslen(args)).
func unknownCommand(args [][]byte) []byte {
	var list []byte
	for _, a := range args[1:] {
		if len(list) >= 128 {
			break
		}
		a = cString(a)
		a = a[:min(len(a), 128-len(list))]
		list = append(list, '\'')
		list = append(list, a...)
		list = append(list, "' "...)
	}
	return serverError("unknown command '" + string(cut128(args[0])) + "', with args beginning with: " + string(list))
}

// unknownSubcommand is the server's text for an unknown subcommand of a
// container command: "Try <CONTAINER> HELP." with the name as sent, in
// upper case.
func unknownSubcommand(args [][]byte) []byte {
	return serverError("unknown subcommand '" + string(cut128(args[1])) + "'. Try " +
		string(bytes.ToUpper(cString(args[0]))) + " HELP.")
}

// cut128 is a C string printed with %.128s.
func cut128(b []byte) []byte {
	b = cString(b)
	return b[:min(len(b), 128)]
}

// cString is b as the server's printf sees it: up to the first NUL byte.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// serverError is an -ERR reply of msg with CR and LF turned into spaces, as
// the server's rejectCommandFormat does (the arguments come from the
// client and may hold any byte): clienterr.Reply does that.
func serverError(msg string) []byte {
	return clienterr.Reply(clienterr.New(clienterr.Err, msg))
}
