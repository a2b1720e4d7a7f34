package rewrite

import "testing"

// TestDecideUnsubscribe: outside subscribe mode the unsubscribe family is
// answered as the server does: per channel with a count of 0 (arrays in
// RESP2, pushes in RESP3, a nil channel when none is named), or with the
// server's own refusal where it refuses them; never forwarded.
func TestDecideUnsubscribe(t *testing.T) {
	nosub := &NoSub{
		Unsubscribe:  []byte("-NOSUB 'unsubscribe' command executed not in subscribed mode\r\n"),
		PUnsubscribe: []byte("-NOSUB 'punsubscribe' command executed not in subscribed mode\r\n"),
	}
	run(t, []row{
		{name: "UNSUBSCRIBE", args: []string{"UNSUBSCRIBE"}, action: Local,
			reply: "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"},
		{name: "unsubscribe a b c", args: []string{"unsubscribe", "a", "b", "c"}, action: Local,
			reply: "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n" +
				"*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n" +
				"*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n"},
		{name: "PUNSUBSCRIBE binary", args: []string{"PUnsubscribe", "a*\r\n", ""}, action: Local,
			reply: "*3\r\n$12\r\npunsubscribe\r\n$4\r\na*\r\n\r\n:0\r\n*3\r\n$12\r\npunsubscribe\r\n$0\r\n\r\n:0\r\n"},
		{name: "SUNSUBSCRIBE", args: []string{"SUNSUBSCRIBE"}, action: Local,
			reply: "*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n"},
		{name: "RESP3 UNSUBSCRIBE", args: []string{"UNSUBSCRIBE"}, st: State{Proto: 3}, action: Local,
			reply: ">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n"},
		{name: "RESP3 SUNSUBSCRIBE s", args: []string{"SUNSUBSCRIBE", "s"}, st: State{Proto: 3}, action: Local,
			reply: ">3\r\n$12\r\nsunsubscribe\r\n$1\r\ns\r\n:0\r\n"},
		{name: "NOSUB server", args: []string{"UNSUBSCRIBE", "a", "b"}, st: State{NoSub: nosub}, action: Refuse,
			reply: "-NOSUB 'unsubscribe' command executed not in subscribed mode\r\n", reason: ReasonProtocol},
		{name: "NOSUB server, PUNSUBSCRIBE RESP3", args: []string{"PUNSUBSCRIBE"}, st: State{NoSub: nosub, Proto: 3},
			action: Refuse, reply: "-NOSUB 'punsubscribe' command executed not in subscribed mode\r\n", reason: ReasonProtocol},
		{name: "NOSUB server answering SUNSUBSCRIBE per channel", args: []string{"SUNSUBSCRIBE", "x"},
			st: State{NoSub: nosub}, action: Local, reply: "*3\r\n$12\r\nsunsubscribe\r\n$1\r\nx\r\n:0\r\n"},
		{name: "NOSUB server inside MULTI aborts", args: []string{"UNSUBSCRIBE"}, st: State{NoSub: nosub, InMulti: true},
			action: Refuse, reply: "-NOSUB 'unsubscribe' command executed not in subscribed mode\r\n",
			reason: ReasonProtocol, effect: AbortMulti},
		{name: "inside MULTI refused", args: []string{"UNSUBSCRIBE", "a"}, st: State{InMulti: true}, action: Refuse,
			reply:  "-EMQREFUSED emqproxy answers 'UNSUBSCRIBE' itself and cannot queue it in MULTI\r\n",
			reason: ReasonProtocol, effect: AbortMulti},
		{name: "denied first", args: []string{"UNSUBSCRIBE"}, deny: map[string]bool{"UNSUBSCRIBE": true}, action: Refuse,
			reply: "-DENIED emqproxy does not forward 'UNSUBSCRIBE'\r\n", reason: ReasonDenied},
	})
}
