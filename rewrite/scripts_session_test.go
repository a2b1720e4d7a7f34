package rewrite

import (
	"os"
	"path/filepath"
	"testing"
)

const (
	shaEnqueue  = "f44394af848b4027b5e544c86de2c76c938546d9"
	shaClaim    = "87cc0a1199b530dc88271d1d8a878900b902fff0"
	shaComplete = "efd7052cabecf019b67f09a765a1f5de146a9b84"
	shaStats    = "7d47cfd3b0cfa356453d53792c51b6b3ca3e8092"
	shaUnknown  = "0123456789abcdef0123456789abcdef01234567"
)

func body(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "scripts", name+".lua"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecideScripts(t *testing.T) {
	enq := []string{"2", "emq:{q1}:job:1", "emq:{q1}:pending", "1", "payload"}
	stats := []string{"6", "emq:{q}:pending", "b", "c", "d", "e", "f"}
	unknownRefusal := "-EMQREFUSED script " + shaUnknown + " is not pinned; emqproxy does not run unpinned scripts\r\n"
	bodyEnqueue := body(t, "enqueue")
	run(t, []row{
		{name: "EVALSHA verb", args: append([]string{"EVALSHA", shaEnqueue}, enq...), action: Rewrite,
			head: "EMQ.ENQUEUE", replace: 2, queue: "q1", sha: shaEnqueue},
		{name: "evalsha upper-case sha", args: append([]string{"evalsha", "F44394AF848B4027B5E544C86DE2C76C938546D9"}, enq...),
			action: Rewrite, head: "EMQ.ENQUEUE", replace: 2, queue: "q1", sha: shaEnqueue},
		{name: "EVAL verb body", args: append([]string{"EVAL", bodyEnqueue}, enq...), action: Rewrite,
			head: "EMQ.ENQUEUE", replace: 2, queue: "q1", sha: shaEnqueue},
		{name: "EVALSHA verb, key without tag", args: []string{"EVALSHA", shaClaim, "2", "pending", "active", "30000"},
			action: Rewrite, head: "EMQ.CLAIM", replace: 2, sha: shaClaim},
		{name: "EVALSHA verb, empty tag", args: []string{"EVALSHA", shaClaim, "2", "a{}b", "active", "30000"},
			action: Rewrite, head: "EMQ.CLAIM", replace: 2, sha: shaClaim},
		{name: "EVALSHA verb, too few keys", args: []string{"EVALSHA", shaClaim, "1", "emq:{q}:pending", "30000", "x"},
			action: Refuse, reply: "-EMQWIRE EMQ.CLAIM wants 2 keys, got 1\r\n", reason: ReasonShape, queue: "q", sha: shaClaim},
		{name: "EVALSHA verb, too many values", args: []string{"EVALSHA", shaClaim, "2", "a", "b", "1", "2"},
			action: Refuse, reply: "-EMQWIRE EMQ.CLAIM wants 1 values, got 2\r\n", reason: ReasonShape, sha: shaClaim},
		{name: "EVALSHA verb, no values", args: []string{"EVALSHA", shaComplete, "3", "a", "b", "c"},
			action: Refuse, reply: "-EMQWIRE EMQ.COMPLETE wants 2 values, got 0\r\n", reason: ReasonShape},
		{name: "numkeys not integer", args: []string{"EVALSHA", shaEnqueue, "x"}, action: Refuse,
			reply: "-ERR value is not an integer or out of range\r\n", reason: ReasonNumkeys},
		{name: "numkeys -0", args: []string{"EVALSHA", shaEnqueue, "-0"}, action: Refuse,
			reply: "-ERR value is not an integer or out of range\r\n", reason: ReasonNumkeys},
		{name: "numkeys +1", args: []string{"EVAL", "return 1", "+1", "k"}, action: Refuse,
			reply: "-ERR value is not an integer or out of range\r\n", reason: ReasonNumkeys},
		{name: "numkeys negative", args: []string{"EVALSHA", shaEnqueue, "-1"}, action: Refuse,
			reply: "-ERR Number of keys can't be negative\r\n", reason: ReasonNumkeys},
		{name: "numkeys too large", args: []string{"EVALSHA", shaEnqueue, "2", "a"}, action: Refuse,
			reply: "-ERR Number of keys can't be greater than number of args\r\n", reason: ReasonNumkeys},
		{name: "numkeys overflow", args: []string{"EVAL", "return 1", "99999999999999999999"}, action: Refuse,
			reply: "-ERR value is not an integer or out of range\r\n", reason: ReasonNumkeys},
		{name: "EVALSHA arity", args: []string{"EVALSHA", shaEnqueue}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'evalsha' command\r\n", reason: ReasonArity},
		{name: "EVAL arity", args: []string{"EVAL", "return 1"}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'eval' command\r\n", reason: ReasonArity},
		{name: "EVALSHA read leaves read-only", args: append([]string{"EVALSHA", shaStats}, stats...), action: Rewrite,
			head: "EVALSHA_RO", replace: 1, queue: "q", sha: shaStats},
		{name: "EVALSHA read, other shape, read-only", args: []string{"EVALSHA", shaStats, "0"}, action: Rewrite,
			head: "EVALSHA_RO", replace: 1, sha: shaStats},
		{name: "EVAL read body leaves read-only", args: append([]string{"EVAL", body(t, "stats")}, stats...), action: Rewrite,
			head: "EVAL_RO", replace: 1, queue: "q", sha: shaStats},
		{name: "EVAL_RO read passes", args: append([]string{"EVAL_RO", body(t, "stats")}, stats...), action: Pass,
			queue: "q", sha: shaStats},
		{name: "EVALSHA_RO read passes", args: append([]string{"EVALSHA_RO", shaStats}, stats...), action: Pass,
			queue: "q", sha: shaStats},
		{name: "EVALSHA_RO verb refused", args: append([]string{"EVALSHA_RO", shaEnqueue}, enq...), action: Refuse,
			reply:  "-EMQREFUSED script " + shaEnqueue + " is the write verb EMQ.ENQUEUE; it cannot run read-only\r\n",
			reason: ReasonUnknownScript, queue: "q1", sha: shaEnqueue},
		{name: "EVALSHA unknown refused", args: []string{"EVALSHA", shaUnknown, "1", "emq:{z}:k"}, action: Refuse,
			reply: unknownRefusal, reason: ReasonUnknownScript, queue: "z", sha: shaUnknown},
		{name: "EVALSHA unknown upper case named in lower case",
			args: []string{"EVALSHA", "0123456789ABCDEF0123456789ABCDEF01234567", "0"}, action: Refuse,
			reply: unknownRefusal, reason: ReasonUnknownScript, sha: shaUnknown},
		{name: "EVALSHA short sha refused", args: []string{"EVALSHA", "abc", "0"}, action: Refuse,
			reply:  "-EMQREFUSED script abc is not pinned; emqproxy does not run unpinned scripts\r\n",
			reason: ReasonUnknownScript},
		{name: "EVAL unknown body refused", args: []string{"EVAL", "return 1", "0"}, action: Refuse,
			reply: "-EMQREFUSED script e0e1f9fabfc9d4800c877a703b823ac0578ff8db is not pinned; " +
				"emqproxy does not run unpinned scripts\r\n", reason: ReasonUnknownScript},
		{name: "EVALSHA unknown readonly", args: []string{"EVALSHA", shaUnknown, "0"}, readonly: true,
			action: Rewrite, head: "EVALSHA_RO", replace: 1, sha: shaUnknown},
		{name: "EVAL unknown readonly", args: []string{"EVAL", "return 1", "0"}, readonly: true,
			action: Rewrite, head: "EVAL_RO", replace: 1, sha: "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"},
		{name: "EVAL_RO unknown readonly passes", args: []string{"EVAL_RO", "return 1", "0"}, readonly: true,
			action: Pass},
		{name: "EVAL_RO unknown refused", args: []string{"EVAL_RO", "return 1", "0"}, action: Refuse,
			reply: "-EMQREFUSED script e0e1f9fabfc9d4800c877a703b823ac0578ff8db is not pinned; " +
				"emqproxy does not run unpinned scripts\r\n", reason: ReasonUnknownScript},
		{name: "EVALSHA verb inside MULTI rewrites", args: append([]string{"EVALSHA", shaEnqueue}, enq...),
			st: State{InMulti: true}, action: Rewrite, head: "EMQ.ENQUEUE", replace: 2, queue: "q1"},
		{name: "EVALSHA unknown inside MULTI aborts", args: []string{"EVALSHA", shaUnknown, "0"},
			st: State{InMulti: true}, action: Refuse, reply: unknownRefusal, reason: ReasonUnknownScript,
			effect: AbortMulti},
		{name: "SCRIPT LOAD verb", args: []string{"SCRIPT", "LOAD", bodyEnqueue}, action: Local,
			reply: "$40\r\n" + shaEnqueue + "\r\n", sha: shaEnqueue},
		{name: "SCRIPT LOAD read passes", args: []string{"script", "load", body(t, "stats")}, action: Pass, sha: shaStats},
		{name: "SCRIPT LOAD unknown refused", args: []string{"SCRIPT", "LOAD", "return 1"}, action: Refuse,
			reply: "-EMQREFUSED script e0e1f9fabfc9d4800c877a703b823ac0578ff8db is not pinned; " +
				"emqproxy does not load unpinned scripts\r\n", reason: ReasonUnknownScript},
		{name: "SCRIPT LOAD unknown readonly passes", args: []string{"SCRIPT", "LOAD", "return 1"}, readonly: true,
			action: Pass},
		{name: "SCRIPT LOAD arity", args: []string{"SCRIPT", "LOAD"}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'script|load' command\r\n", reason: ReasonArity},
		{name: "SCRIPT LOAD verb inside MULTI", args: []string{"SCRIPT", "LOAD", bodyEnqueue},
			st: State{InMulti: true}, action: Refuse,
			reply:  "-EMQREFUSED emqproxy answers 'SCRIPT LOAD' itself and cannot queue it in MULTI\r\n",
			reason: ReasonProtocol, effect: AbortMulti, sha: shaEnqueue},
		{name: "SCRIPT EXISTS verbs", args: []string{"SCRIPT", "EXISTS", shaEnqueue, shaClaim}, action: Local,
			reply: "*2\r\n:1\r\n:1\r\n"},
		{name: "SCRIPT EXISTS no verbs", args: []string{"SCRIPT", "EXISTS", shaStats, shaUnknown}, action: Pass},
		{name: "SCRIPT EXISTS mixed", args: []string{"SCRIPT", "EXISTS", shaUnknown, shaEnqueue}, action: Pass,
			effect: ScriptExists},
		{name: "SCRIPT EXISTS arity", args: []string{"SCRIPT", "EXISTS"}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'script|exists' command\r\n", reason: ReasonArity},
		{name: "SCRIPT arity", args: []string{"SCRIPT"}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'script' command\r\n", reason: ReasonArity},
		{name: "SCRIPT DEBUG", args: []string{"SCRIPT", "DEBUG", "YES"}, action: Refuse,
			reply:  "-EMQREFUSED emqproxy does not forward 'SCRIPT DEBUG': it would change a shared upstream connection\r\n",
			reason: ReasonProtocol},
		{name: "SCRIPT HELP passes", args: []string{"SCRIPT", "HELP"}, action: Pass},
	})
}

func TestDecideSessions(t *testing.T) {
	multi := State{InMulti: true}
	run(t, []row{
		{name: "MULTI", args: []string{"multi"}, action: Local, reply: "+OK\r\n", effect: Multi},
		{name: "MULTI nested", args: []string{"MULTI"}, st: multi, action: Refuse,
			reply: "-ERR MULTI calls can not be nested\r\n", reason: ReasonProtocol},
		{name: "MULTI arity", args: []string{"MULTI", "x"}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'multi' command\r\n", reason: ReasonArity},
		{name: "EXEC", args: []string{"EXEC"}, st: multi, action: Pass, effect: Exec},
		{name: "EXEC aborted", args: []string{"EXEC"}, st: State{InMulti: true, MultiAborted: true}, action: Refuse,
			reply: "-EXECABORT Transaction discarded because of previous errors.\r\n", reason: ReasonProtocol,
			effect: Discard},
		{name: "EXEC without MULTI", args: []string{"EXEC"}, action: Refuse,
			reply: "-ERR EXEC without MULTI\r\n", reason: ReasonProtocol},
		{name: "EXEC arity outside", args: []string{"EXEC", "x"}, action: Refuse,
			reply:  "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n",
			reason: ReasonArity},
		{name: "EXEC arity inside", args: []string{"EXEC", "x"}, st: multi, action: Refuse,
			reply:  "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n",
			reason: ReasonArity, effect: Discard},
		{name: "DISCARD", args: []string{"DISCARD"}, st: multi, action: Local, reply: "+OK\r\n", effect: Discard},
		{name: "DISCARD without MULTI", args: []string{"DISCARD"}, action: Refuse,
			reply: "-ERR DISCARD without MULTI\r\n", reason: ReasonProtocol},
		{name: "DISCARD arity inside", args: []string{"DISCARD", "x"}, st: multi, action: Refuse,
			reply: "-ERR wrong number of arguments for 'discard' command\r\n", reason: ReasonArity, effect: AbortMulti},
		{name: "WATCH", args: []string{"WATCH", "a", "b"}, action: Pass, effect: Watch},
		{name: "WATCH inside MULTI", args: []string{"WATCH", "a"}, st: multi, action: Refuse,
			reply: "-ERR WATCH inside MULTI is not allowed\r\n", reason: ReasonProtocol},
		{name: "WATCH arity", args: []string{"WATCH"}, action: Refuse,
			reply: "-ERR wrong number of arguments for 'watch' command\r\n", reason: ReasonArity},
		{name: "UNWATCH", args: []string{"UNWATCH"}, action: Pass, effect: Unwatch},
		{name: "UNWATCH inside MULTI", args: []string{"UNWATCH"}, st: multi, action: Pass},
		{name: "SUBSCRIBE", args: []string{"SUBSCRIBE", "c"}, action: Pass, effect: Subscribe},
		{name: "PSUBSCRIBE", args: []string{"psubscribe", "c*"}, action: Pass, effect: Subscribe},
		{name: "SSUBSCRIBE", args: []string{"SSUBSCRIBE", "c"}, action: Pass, effect: Subscribe},
		{name: "SUBSCRIBE inside MULTI", args: []string{"SUBSCRIBE", "c"}, st: multi, action: Refuse,
			reply: "-EMQREFUSED emqproxy does not queue 'SUBSCRIBE' in MULTI: it would put a shared upstream " +
				"connection in subscribe mode\r\n", reason: ReasonProtocol, effect: AbortMulti},
		{name: "BLPOP", args: []string{"BLPOP", "a", "0"}, action: Pass, effect: Blocking},
		{name: "BRPOP", args: []string{"brpop", "a", "1"}, action: Pass, effect: Blocking},
		{name: "BLMOVE", args: []string{"BLMOVE", "a", "b", "LEFT", "RIGHT", "0"}, action: Pass, effect: Blocking},
		{name: "BRPOPLPUSH", args: []string{"BRPOPLPUSH", "a", "b", "0"}, action: Pass, effect: Blocking},
		{name: "BLMPOP", args: []string{"BLMPOP", "0", "1", "a", "LEFT"}, action: Pass, effect: Blocking},
		{name: "BZPOPMIN", args: []string{"BZPOPMIN", "a", "0"}, action: Pass, effect: Blocking},
		{name: "BZPOPMAX", args: []string{"BZPOPMAX", "a", "0"}, action: Pass, effect: Blocking},
		{name: "BZMPOP", args: []string{"BZMPOP", "0", "1", "a", "MIN"}, action: Pass, effect: Blocking},
		{name: "WAIT", args: []string{"WAIT", "0", "0"}, action: Pass, effect: Blocking},
		{name: "WAITAOF", args: []string{"WAITAOF", "0", "0", "0"}, action: Pass, effect: Blocking},
		{name: "XREAD BLOCK", args: []string{"XREAD", "COUNT", "1", "block", "0", "STREAMS", "s", "$"},
			action: Pass, effect: Blocking},
		{name: "XREADGROUP BLOCK", args: []string{"XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"},
			action: Pass, effect: Blocking},
		{name: "XREAD without BLOCK", args: []string{"XREAD", "STREAMS", "block", "0"}, action: Pass},
		{name: "BLPOP inside MULTI", args: []string{"BLPOP", "a", "0"}, st: multi, action: Pass},
		{name: "PING inside MULTI passes", args: []string{"PING"}, st: multi, action: Pass},
		{name: "ECHO inside MULTI passes", args: []string{"ECHO", "x"}, st: multi, action: Pass},
		{name: "SELECT db inside MULTI passes", args: []string{"SELECT", "0"}, st: multi, action: Pass},
		{name: "SELECT other inside MULTI", args: []string{"SELECT", "2"}, st: multi, action: Refuse,
			reply: "-ERR SELECT is not allowed: emqproxy serves database 0 only\r\n", reason: ReasonSelect,
			effect: AbortMulti},
		{name: "CLIENT SETNAME inside MULTI", args: []string{"CLIENT", "SETNAME", "x"}, st: multi, action: Refuse,
			reply:  "-EMQREFUSED emqproxy answers 'CLIENT SETNAME' itself and cannot queue it in MULTI\r\n",
			reason: ReasonProtocol, effect: AbortMulti},
		{name: "QUIT inside MULTI", args: []string{"QUIT"}, st: multi, action: Local, reply: "+OK\r\n", effect: Quit},
		{name: "RESET inside MULTI", args: []string{"RESET"}, st: multi, action: Local, reply: "+RESET\r\n", effect: Reset},
		{name: "GET passes", args: []string{"GET", "k"}, action: Pass},
		{name: "SET passes", args: []string{"set", "k", "v", "EX", "10"}, action: Pass},
		{name: "unknown command passes", args: []string{"FOO", "bar"}, action: Pass},
		{name: "long unknown name passes", args: []string{"THIS-IS-A-VERY-LONG-COMMAND-NAME-FOR-A-TABLE"}, action: Pass},
		{name: "GET inside MULTI passes", args: []string{"GET", "k"}, st: multi, action: Pass},
	})
}
