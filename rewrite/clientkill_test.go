package rewrite

import (
	"reflect"
	"testing"
)

// TestDecideClientUnblockAndKill: where policy.allow opens them, CLIENT
// UNBLOCK and CLIENT KILL with ID and SKIPME filters only are answered by
// the session for its server's clients, with the server's errors; every
// other CLIENT KILL form, and both without policy.allow, go on through
// the deny list and the rule as before; inside MULTI they are refused like
// every local answer.
func TestDecideClientUnblockAndKill(t *testing.T) {
	client := map[string]bool{"CLIENT": true}
	run(t, []row{
		{name: "unblock", args: []string{"CLIENT", "UNBLOCK", "7"}, allow: client, action: Local, reply: ":0\r\n", effect: ClientUnblock},
		{name: "unblock opened alone", args: []string{"client", "unblock", "7", "error"}, allow: map[string]bool{"CLIENT UNBLOCK": true},
			action: Local, reply: ":0\r\n", effect: ClientUnblock},
		{name: "unblock closed", args: []string{"CLIENT", "UNBLOCK", "7"}, action: Pass},
		{name: "unblock arity", args: []string{"CLIENT", "UNBLOCK"}, allow: client, action: Refuse,
			reply: "-ERR wrong number of arguments for 'client|unblock' command\r\n", reason: ReasonArity},
		{name: "unblock too many", args: []string{"CLIENT", "Unblock", "7", "error", "x"}, allow: client, action: Refuse,
			reply: "-ERR unknown subcommand or wrong number of arguments for 'Unblock'. Try CLIENT HELP.\r\n", reason: ReasonArity},
		{name: "unblock reason", args: []string{"CLIENT", "UNBLOCK", "x", "later"}, allow: client, action: Refuse,
			reply: "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n", reason: ReasonProtocol},
		{name: "unblock id", args: []string{"CLIENT", "UNBLOCK", "x"}, allow: client, action: Refuse,
			reply: "-ERR value is not an integer or out of range\r\n", reason: ReasonProtocol},
		{name: "kill id", args: []string{"CLIENT", "KILL", "ID", "7"}, allow: client, action: Local, reply: ":0\r\n", effect: ClientKill},
		{name: "kill id closed", args: []string{"CLIENT", "KILL", "ID", "7"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'CLIENT KILL'\r\n", reason: ReasonDenied},
		{name: "kill id 0", args: []string{"CLIENT", "KILL", "ID", "0"}, allow: client, action: Refuse,
			reply: "-ERR client-id should be greater than 0\r\n", reason: ReasonProtocol},
		{name: "kill skipme", args: []string{"CLIENT", "KILL", "ID", "7", "SKIPME", "perhaps"}, allow: client, action: Refuse,
			reply: "-ERR syntax error\r\n", reason: ReasonProtocol},
		{name: "kill by type", args: []string{"CLIENT", "KILL", "TYPE", "normal"}, allow: client, action: Pass},
		{name: "kill old form", args: []string{"CLIENT", "KILL", "127.0.0.1:5"}, allow: client, action: Pass},
		{name: "in MULTI", args: []string{"CLIENT", "UNBLOCK", "7"}, allow: client, st: State{InMulti: true},
			action: Refuse, effect: AbortMulti, reason: ReasonProtocol,
			reply: "-EMQREFUSED emqproxy answers 'CLIENT UNBLOCK' itself and cannot queue it in MULTI\r\n"},
	})
	p := &Policy{Map: testMap(t), Allow: map[string]bool{"CLIENT KILL": true}}
	for _, c := range []struct {
		args []string
		want ClientTarget
	}{
		{[]string{"CLIENT", "KILL", "ID", "7"}, ClientTarget{ID: 7, SkipMe: true}},
		{[]string{"CLIENT", "KILL", "ID", "7", "SKIPME", "no"}, ClientTarget{ID: 7}},
		{[]string{"CLIENT", "KILL", "SKIPME", "yes"}, ClientTarget{SkipMe: true}},
		{[]string{"CLIENT", "KILL", "ID", "7", "id", "8"}, ClientTarget{ID: 8, SkipMe: true}},
	} {
		d := Decide(argv(c.args...), &State{}, p)
		if d.Target == nil || !reflect.DeepEqual(*d.Target, c.want) {
			t.Errorf("%q: target %+v, want %+v", c.args, d.Target, c.want)
		}
	}
	p.Allow = map[string]bool{"CLIENT UNBLOCK": true}
	if d := Decide(argv("CLIENT", "UNBLOCK", "-3", "ERROR"), &State{}, p); d.Target == nil || *d.Target != (ClientTarget{ID: -3, Error: true}) {
		t.Errorf("CLIENT UNBLOCK -3 ERROR: target %+v", d.Target)
	}
}
