package rewrite

import (
	"strings"
	"testing"
)

func TestDecideDeny(t *testing.T) {
	run(t, []row{
		{name: "CONFIG SET", args: []string{"config", "set", "maxmemory", "1"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'CONFIG SET'\r\n", reason: ReasonDenied},
		{name: "CONFIG GET passes", args: []string{"CONFIG", "GET", "maxmemory"}, action: Pass},
		{name: "FLUSHALL", args: []string{"FlushAll"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'FLUSHALL'\r\n", reason: ReasonDenied},
		{name: "FLUSHDB", args: []string{"FLUSHDB", "ASYNC"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'FLUSHDB'\r\n", reason: ReasonDenied},
		{name: "MODULE LIST", args: []string{"MODULE", "LIST"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'MODULE'\r\n", reason: ReasonDenied},
		{name: "DEBUG", args: []string{"DEBUG", "SLEEP", "0"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'DEBUG'\r\n", reason: ReasonDenied},
		{name: "SHUTDOWN", args: []string{"SHUTDOWN", "NOSAVE"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'SHUTDOWN'\r\n", reason: ReasonDenied},
		{name: "ACL SETUSER", args: []string{"ACL", "SETUSER", "x"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'ACL SETUSER'\r\n", reason: ReasonDenied},
		{name: "ACL WHOAMI is answered", args: []string{"ACL", "WHOAMI"}, action: Local, reply: "$7\r\ndefault\r\n"},
		{name: "ACL USERS passes the deny list", args: []string{"ACL", "USERS"}, action: Pass},
		{name: "MONITOR", args: []string{"MONITOR"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'MONITOR'\r\n", reason: ReasonDenied},
		{name: "SCRIPT FLUSH", args: []string{"SCRIPT", "FLUSH"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'SCRIPT FLUSH'\r\n", reason: ReasonDenied},
		{name: "SCRIPT KILL", args: []string{"script", "kill"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'SCRIPT KILL'\r\n", reason: ReasonDenied},
		{name: "EMQ.INSTALL", args: []string{"emq.install", "1", "{emq}:version"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'EMQ.INSTALL'\r\n", reason: ReasonDenied},
		{name: "FUNCTION LOAD", args: []string{"FUNCTION", "LOAD", "x"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'FUNCTION LOAD'\r\n", reason: ReasonDenied},
		{name: "FUNCTION LIST passes", args: []string{"FUNCTION", "LIST"}, action: Pass},
		{name: "FCALL", args: []string{"FCALL", "f", "0"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'FCALL'\r\n", reason: ReasonDenied},
		{name: "FCALL_RO passes", args: []string{"FCALL_RO", "f", "0"}, action: Pass},
		{name: "CLIENT KILL", args: []string{"CLIENT", "KILL", "ID", "1"}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'CLIENT KILL'\r\n", reason: ReasonDenied},
		{name: "unknown command with denied subcommand form", args: []string{"XYZ", "abc"},
			deny: map[string]bool{"XYZ ABC": true}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'XYZ ABC'\r\n", reason: ReasonDenied},
		{name: "configured list replaces default", args: []string{"FLUSHALL"},
			deny: map[string]bool{"KEYS": true}, action: Pass},
		{name: "configured list", args: []string{"keys", "*"}, deny: map[string]bool{"KEYS": true},
			action: Refuse, reply: "-DENIED emqproxy does not forward 'KEYS'\r\n", reason: ReasonDenied},
		{name: "empty configured list", args: []string{"MONITOR"}, deny: map[string]bool{}, action: Pass},
		{name: "allow lifts an entry", args: []string{"flushall"}, allow: map[string]bool{"FLUSHALL": true}, action: Pass},
		{name: "allow of a command lifts its subcommand entries", args: []string{"config", "set", "x", "1"},
			allow: map[string]bool{"CONFIG": true}, action: Pass},
		{name: "allow of one subcommand lifts only it", args: []string{"CONFIG", "REWRITE"},
			allow: map[string]bool{"CONFIG SET": true}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'CONFIG REWRITE'\r\n", reason: ReasonDenied},
		{name: "allow of a subcommand does not lift its command's entry", args: []string{"MODULE", "LIST"},
			allow: map[string]bool{"MODULE LIST": true}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'MODULE'\r\n", reason: ReasonDenied},
		{name: "denied inside MULTI aborts", args: []string{"FLUSHALL"}, st: State{InMulti: true},
			action: Refuse, reply: "-DENIED emqproxy does not forward 'FLUSHALL'\r\n", reason: ReasonDenied,
			effect: AbortMulti},
	})
}

const fenceWrite = "-FENCE {emq}:version belongs to emqproxy; write refused\r\n"
const notFenced = "-FENCE upstream is not fenced; {emq}:version is unavailable\r\n"

func TestDecideVersionKey(t *testing.T) {
	fenced := State{Fenced: true}
	vk := VersionKey
	write := func(name string, args ...string) row {
		return row{name: name, args: args, st: fenced, action: Refuse, reply: fenceWrite, reason: ReasonVersionKey}
	}
	run(t, []row{
		{name: "GET fenced", args: []string{"get", vk}, st: fenced, action: Local, reply: "$12\r\nechomq:4.0.0\r\n"},
		{name: "GET not fenced", args: []string{"GET", vk}, action: Refuse, reply: notFenced, reason: ReasonVersionKey},
		{name: "GET wire-6 passes", args: []string{"GET", vk}, st: State{Wire6: true}, action: Pass},
		{name: "SET NX", args: []string{"SET", vk, "echomq:4.0.0", "nx"}, st: fenced, action: Local, reply: "$-1\r\n"},
		{name: "SET NX not fenced", args: []string{"SET", vk, "echomq:4.0.0", "NX"}, action: Local, reply: "$-1\r\n"},
		{name: "SET NX EX", args: []string{"SET", vk, "b", "EX", "10", "NX"}, st: fenced, action: Local, reply: "$-1\r\n"},
		{name: "SET NX GET", args: []string{"SET", vk, "b", "NX", "GET"}, st: fenced, action: Local,
			reply: "$12\r\nechomq:4.0.0\r\n"},
		{name: "SET NX GET not fenced", args: []string{"SET", vk, "b", "NX", "GET"}, action: Refuse,
			reply: notFenced, reason: ReasonVersionKey},
		{name: "SET NX XX", args: []string{"SET", vk, "b", "NX", "XX"}, st: fenced, action: Refuse,
			reply: fenceWrite, reason: ReasonVersionKey},
		{name: "SET NX EX without value", args: []string{"SET", vk, "b", "NX", "EX"}, st: fenced, action: Refuse,
			reply: fenceWrite, reason: ReasonVersionKey},
		write("SET", "SET", vk, "echomq:6.0.0"),
		write("SET XX", "SET", vk, "x", "XX"),
		write("SETNX", "SETNX", vk, "x"),
		write("SETEX", "SETEX", vk, "10", "x"),
		write("PSETEX", "PSETEX", vk, "10", "x"),
		write("GETSET", "GETSET", vk, "x"),
		write("GETDEL", "GETDEL", vk),
		write("GETEX", "GETEX", vk, "PERSIST"),
		write("DEL", "DEL", "a", vk),
		write("UNLINK", "UNLINK", vk),
		write("EXPIRE", "EXPIRE", vk, "1"),
		write("PEXPIREAT", "PEXPIREAT", vk, "1"),
		write("PERSIST", "PERSIST", vk),
		write("SETRANGE", "SETRANGE", vk, "0", "x"),
		write("APPEND", "APPEND", vk, "x"),
		write("INCR", "INCR", vk),
		write("INCRBYFLOAT", "INCRBYFLOAT", vk, "1"),
		write("RENAME from", "RENAME", vk, "x"),
		write("RENAME to", "RENAME", "x", vk),
		write("RENAMENX to", "RENAMENX", "x", vk),
		write("COPY to", "COPY", "x", vk, "REPLACE"),
		write("MOVE", "MOVE", vk, "1"),
		write("MSET", "MSET", "a", "1", vk, "2"),
		write("MSETNX", "MSETNX", vk, "2"),
		write("RESTORE", "RESTORE", vk, "0", "payload", "REPLACE"),
		write("OBJECT", "OBJECT", "ENCODING", vk),
		write("DUMP", "DUMP", vk),
		write("MGET", "MGET", "a", vk),
		write("LPUSH", "LPUSH", vk, "x"),
		write("SORT with STORE", "SORT", "list", "STORE", vk),
		write("unknown command", "EMQ.ENQUEUE", "2", vk, "b", "1", "p"),
		write("EVAL naming the key", "EVAL", "return 1", "1", vk),
		write("BLMPOP", "BLMPOP", "0", "1", vk, "LEFT"),
		write("SET GET without NX", "SET", vk, "x", "GET"),
		{name: "MSET value is not a key", args: []string{"MSET", "a", vk}, st: fenced, action: Pass},
		{name: "SET value is not a key", args: []string{"SET", "a", vk}, st: fenced, action: Pass},
		{name: "EXISTS alone", args: []string{"EXISTS", vk}, st: fenced, action: Local, reply: ":1\r\n"},
		{name: "EXISTS twice", args: []string{"EXISTS", vk, vk}, st: fenced, action: Local, reply: ":2\r\n"},
		{name: "EXISTS with others passes", args: []string{"EXISTS", "a", vk}, st: fenced, action: Pass},
		{name: "EXISTS not fenced", args: []string{"EXISTS", "a", vk}, action: Refuse, reply: notFenced,
			reason: ReasonVersionKey},
		{name: "TYPE", args: []string{"TYPE", vk}, st: fenced, action: Local, reply: "+string\r\n"},
		{name: "STRLEN", args: []string{"STRLEN", vk}, st: fenced, action: Local, reply: ":12\r\n"},
		{name: "TTL", args: []string{"TTL", vk}, st: fenced, action: Local, reply: ":-1\r\n"},
		{name: "PTTL", args: []string{"pttl", vk}, st: fenced, action: Local, reply: ":-1\r\n"},
		{name: "WATCH passes", args: []string{"WATCH", vk}, st: fenced, action: Pass, effect: Watch},
		{name: "EMQ.VERSION", args: []string{"emq.version"}, action: Pass, effect: Wire6},
		{name: "wire-6 DEL passes", args: []string{"DEL", vk}, st: State{Wire6: true}, action: Pass},
		{name: "other case is another key", args: []string{"DEL", "{EMQ}:version"}, st: fenced, action: Pass},
		{name: "write inside MULTI", args: []string{"DEL", vk}, st: State{Fenced: true, InMulti: true},
			action: Refuse, reply: fenceWrite, reason: ReasonVersionKey, effect: AbortMulti},
		{name: "GET inside MULTI", args: []string{"GET", vk}, st: State{Fenced: true, InMulti: true},
			action: Refuse, reply: "-EMQREFUSED emqproxy answers 'GET' itself and cannot queue it in MULTI\r\n",
			reason: ReasonProtocol, effect: AbortMulti},
	})
}

// TestDefaultDenyShortcut checks that the default policy's shortcut (no
// deny-list lookup for commands DefaultDeny cannot name) decides exactly as
// looking every command up in a copy of DefaultDeny does, for every command
// of the table and every name DefaultDeny lists, with each subcommand
// DefaultDeny lists.
func TestDefaultDenyShortcut(t *testing.T) {
	copied := make(map[string]bool, len(DefaultDeny))
	subs := []string{"x"}
	names := map[string]bool{}
	for name := range commands {
		names[name] = true
	}
	for k, v := range DefaultDeny {
		copied[k] = v
		name, sub, ok := strings.Cut(k, " ")
		names[name] = true
		if ok {
			subs = append(subs, strings.ToLower(sub))
		}
	}
	shortcut, lookedUp := &Policy{}, &Policy{Deny: copied}
	checked := 0
	for name := range names {
		for _, sub := range subs {
			args := [][]byte{[]byte(strings.ToLower(name)), []byte(sub)}
			var buf [maxName]byte
			up, info, known := lookup(&buf, args[0])
			gotName, got := denied(args, up, info, known, shortcut)
			wantName, want := denied(args, up, info, known, lookedUp)
			if got != want || gotName != wantName {
				t.Errorf("%s %s: default policy denied=%v %q, looked up denied=%v %q", name, sub, got, gotName, want, wantName)
			}
			checked++
		}
	}
	if checked < 200 {
		t.Fatalf("checked only %d commands", checked)
	}
}

// TestLookupIndex checks the hashed index against the command table: every
// name in any case finds its own entry, and names not in the table (or
// too long, or differing in one byte) are unknown.
func TestLookupIndex(t *testing.T) {
	var buf [maxName]byte
	for name, want := range commands {
		for _, in := range []string{name, strings.ToLower(name), strings.ToLower(name[:1]) + name[1:]} {
			up, got, known := lookup(&buf, []byte(in))
			if !known || got != want || string(up) != name {
				t.Errorf("lookup(%q) = %q %+v %v, want %q %+v true", in, up, got, known, name, want)
			}
		}
		_, inTable := commands[name+"X"]
		if _, _, known := lookup(&buf, []byte(name+"X")); known != inTable {
			t.Errorf("lookup(%q): known %v, in the table %v", name+"X", known, inTable)
		}
	}
	for _, in := range []string{"", "NOSUCH", "GE", "GETT", strings.Repeat("A", maxName+1)} {
		if _, _, known := lookup(&buf, []byte(in)); known {
			t.Errorf("lookup(%q) is known", in)
		}
	}
	if _, info, _ := lookup(&buf, []byte("module")); info.flags&fDefaultDeny == 0 {
		t.Errorf("MODULE is not marked as named by DefaultDeny")
	}
}
