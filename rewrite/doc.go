// Package rewrite decides, for one client command, what the proxy does with
// it: forward it unchanged, forward it with a rewritten head (EVALSHA of a
// pinned verb script becomes EMQ.<TOKEN> with the identical tail), refuse
// it with an exact error, or answer it locally.
//
// The rule, in order (proxy.md, "Decision per client command"):
// authentication, connection-local commands, the deny list, the version
// key, scripts, session commands, and everything else passes.
//
// Decide is pure: it reads the command, the session's state and the policy,
// and returns a Decision. It never touches a socket, never mutates its
// input, and never keeps a reference to it beyond the returned Decision.
// The caller (the proxy's session loop) applies the Decision's Effect to
// the session state.
package rewrite
