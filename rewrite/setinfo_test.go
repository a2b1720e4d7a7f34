package rewrite

import "testing"

// TestDecideSetInfoAndWhoami: CLIENT SETINFO is answered for the session
// where the server has it (State.SetInfo), with Valkey 8's errors, and left
// to the server's table where it has not (Redis 7.0); ACL WHOAMI names the
// session's user; both are refused inside MULTI like every local answer.
func TestDecideSetInfoAndWhoami(t *testing.T) {
	has := State{SetInfo: true}
	run(t, []row{
		{name: "lib-name", args: []string{"CLIENT", "SETINFO", "lib-name", "valkey-go"}, st: has,
			action: Local, reply: "+OK\r\n", effect: SetLibName, arg: "valkey-go"},
		{name: "LIB-VER", args: []string{"client", "setinfo", "LIB-VER", "1.0.79"}, st: has,
			action: Local, reply: "+OK\r\n", effect: SetLibVer, arg: "1.0.79"},
		{name: "cleared", args: []string{"CLIENT", "SETINFO", "lib-ver", ""}, st: has,
			action: Local, reply: "+OK\r\n", effect: SetLibVer},
		{name: "a space", args: []string{"CLIENT", "SETINFO", "Lib-Name", "a b"}, st: has, action: Refuse,
			reply: "-ERR Lib-Name cannot contain spaces, newlines or special characters.\r\n", reason: ReasonProtocol},
		{name: "a byte past ~", args: []string{"CLIENT", "SETINFO", "lib-ver", "caf\xc3\xa9"}, st: has, action: Refuse,
			reply: "-ERR lib-ver cannot contain spaces, newlines or special characters.\r\n", reason: ReasonProtocol},
		{name: "unknown option", args: []string{"CLIENT", "SETINFO", "lib-nom", "x"}, st: has, action: Refuse,
			reply: "-ERR Unrecognized option 'lib-nom'\r\n", reason: ReasonProtocol},
		{name: "arity", args: []string{"CLIENT", "SETINFO", "lib-name"}, st: has, action: Refuse,
			reply: "-ERR wrong number of arguments for 'client|setinfo' command\r\n", reason: ReasonArity},
		{name: "a server without it", args: []string{"CLIENT", "SETINFO", "lib-name", "x"}, action: Pass},
		{name: "in MULTI", args: []string{"CLIENT", "SETINFO", "lib-name", "x"}, st: State{SetInfo: true, InMulti: true},
			action: Refuse, effect: AbortMulti, reason: ReasonProtocol,
			reply: "-EMQREFUSED emqproxy answers 'CLIENT SETINFO' itself and cannot queue it in MULTI\r\n"},
		{name: "whoami default", args: []string{"ACL", "WHOAMI"}, action: Local, reply: "$7\r\ndefault\r\n"},
		{name: "whoami alice", args: []string{"acl", "whoami"}, st: State{Authenticated: true, User: "alice"},
			action: Local, reply: "$5\r\nalice\r\n"},
		{name: "whoami arity", args: []string{"ACL", "WHOAMI", "x"}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'acl|whoami' command\r\n", reason: ReasonArity},
		{name: "ACL CAT passes", args: []string{"ACL", "CAT"}, action: Pass},
	})
}
