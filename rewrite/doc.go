// Package rewrite decides, for one client command, what the proxy does with
// it: forward it unchanged, forward it with a rewritten head (EVALSHA of a
// pinned verb script becomes EMQ.<TOKEN> with the identical tail), refuse
// it with an exact error, or answer it locally.
//
// The rule, in order (proxy.md, "Decision per client command"):
// authentication, connection-local commands, the deny list, the version
// key, scripts, session commands, and everything else passes. Commands are
// classified by one table (table.go, upper-case name to kind, flags and key
// positions); a command not in it gets the conservative default: the deny
// list is checked with and without its first argument as a subcommand, and
// any argument equal to the version key makes a wire-4 session's command a
// refused write.
//
// A script call is read in one place (scriptcall.go): ParseScriptCall
// says which call a command is, its numkeys (or the server's error for
// it), its keys and their queue, and QueueOf is the one rule of the queue
// a command's keys name. The plan, the capture and the replay read script
// calls and queues with them.
//
// Replies the proxy answers as the server would are byte-exact with redis
// 7.0 speaking RESP2 (checked against a real server by the integration
// test). The proxy's own refusals start with an upper-case code word:
// DENIED (deny list), FENCE (the version key), EMQREFUSED (unpinned or
// read-only-violating scripts, commands that would change a shared
// upstream connection, local answers inside MULTI), EMQWIRE (a verb call
// whose shape differs from its pin, in the module's own text).
//
// Decide is pure: it reads the command, the session's state and the policy,
// and returns a Decision. It never touches a socket, never mutates its
// input, and keeps no reference to it beyond the returned Decision. It does
// not allocate for a plain pass or a verb rewrite. The caller (the proxy's
// session loop) applies the Decision's Effect to the session state; the
// package must not grow I/O, logging or session state of its own.
package rewrite
