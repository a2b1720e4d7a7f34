package rewrite

import (
	"strings"
	"testing"
)

// TestParseScriptCall: the one reading of a script call: its kind by name
// in any case, its keys, and the server's error for a numkeys it refuses.
func TestParseScriptCall(t *testing.T) {
	for _, c := range []struct {
		in    string
		kind  ScriptKind
		keys  string // space-separated
		err   []byte
		queue string
	}{
		{in: "GET emq:{q}:k", kind: NotScript},
		{in: "evalsha abc 2 emq:{q}:a emq:{r}:b v", kind: ScriptEvalSha, keys: "emq:{q}:a emq:{r}:b", queue: "q"},
		{in: "EVAL body 0 v", kind: ScriptEval},
		{in: "Eval_Ro body 1 plain", kind: ScriptEvalRO, keys: "plain"},
		{in: "EVALSHA_RO abc 1 {x}k", kind: ScriptEvalShaRO, keys: "{x}k", queue: "x"},
		{in: "FCALL f 1 emq:{q}:a", kind: ScriptFCall, keys: "emq:{q}:a", queue: "q"},
		{in: "fcall_ro f 0", kind: ScriptFCallRO},
		{in: "EVALSHA abc", kind: ScriptEvalSha, err: replyNotInt},
		{in: "EVALSHA abc x k", kind: ScriptEvalSha, err: replyNotInt},
		{in: "EVALSHA abc +1 k", kind: ScriptEvalSha, err: replyNotInt},
		{in: "EVALSHA abc 01 k", kind: ScriptEvalSha, err: replyNotInt},
		{in: "EVALSHA abc 2 k", kind: ScriptEvalSha, err: replyManyKeys},
		{in: "EVALSHA abc -1 k", kind: ScriptEvalSha, err: replyNegKeys},
		{in: "EVALSHAX abc 0", kind: NotScript},
	} {
		sc := ParseScriptCall(argv(strings.Fields(c.in)...))
		var keys []string
		for _, k := range sc.Keys {
			keys = append(keys, string(k))
		}
		if sc.Kind != c.kind || strings.Join(keys, " ") != c.keys || string(sc.Err) != string(c.err) || string(sc.Queue()) != c.queue {
			t.Errorf("%s: kind %d keys %q err %q queue %q; want %d %q %q %q", c.in, sc.Kind, keys, sc.Err, sc.Queue(), c.kind, c.keys, c.err, c.queue)
		}
		if n, ok := sc.NumKeys(); ok != (c.kind != NotScript && c.err == nil) || n != len(keys) {
			t.Errorf("%s: NumKeys %d %v", c.in, n, ok)
		}
	}
	if k := ScriptKindOf([]byte("evalsha_ro")); !k.ReadOnly() || !k.Eval() || k.Body() {
		t.Errorf("EVALSHA_RO: %d", k)
	}
	if k := ScriptKindOf([]byte("FCALL")); k.Eval() || k.ReadOnly() || k.Body() {
		t.Errorf("FCALL: %d", k)
	}
	if k := ScriptKindOf([]byte("eval")); !k.Body() || !k.Eval() || k.ReadOnly() {
		t.Errorf("EVAL: %d", k)
	}
}

// TestParseScriptCallDoesNotAllocate: the plan reads it per command.
func TestParseScriptCallDoesNotAllocate(t *testing.T) {
	args := argv("EVALSHA", "abc", "2", "emq:{q}:a", "emq:{q}:b", "v")
	if n := testing.AllocsPerRun(100, func() {
		if sc := ParseScriptCall(args); len(sc.Keys) != 2 {
			t.Fatal(sc)
		}
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// TestQueueOf: a command's queue under each rule: its first key's, or the
// first job-core key among its arguments (the capture's plain commands).
func TestQueueOf(t *testing.T) {
	for _, c := range []struct {
		in   string
		rule QueueRule
		want string
	}{
		{"emq:{q1}:k", FirstKey, "q1"},
		{"plain emq:{q2}:k", FirstKey, ""},
		{"{x}y", FirstKey, "x"},
		{"", FirstKey, ""},
		{"emq:{q1}:k", FirstJobKey, "q1"},
		{"x emq:{q2}:job:1 f", FirstJobKey, "q2"},
		{"emq:nohashtag", FirstJobKey, ""},
		{"other:{q}:k", FirstJobKey, ""},
		{"emq:{a}:x emq:{b}:y", FirstJobKey, "a"},
		{"emq:{}:x emq:{b}:y", FirstJobKey, "b"},
	} {
		if got := string(QueueOf(argv(strings.Fields(c.in)...), c.rule)); got != c.want {
			t.Errorf("QueueOf(%s, %d) = %q, want %q", c.in, c.rule, got, c.want)
		}
	}
}
