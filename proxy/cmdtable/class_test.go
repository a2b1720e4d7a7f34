package cmdtable

import (
	"slices"
	"testing"

	"github.com/emqproxy/emqproxy/fence"
)

// entry builds a COMMAND entry without key specs: name, arity, flags,
// first, last, step, ACL categories, and subcommands when given.
func entry(name string, arity int64, flags, cats []string, first, last, step int64, subs ...fence.Reply) fence.Reply {
	strs := func(ss []string) fence.Reply {
		r := fence.Reply{Type: '*'}
		for _, s := range ss {
			r.Elems = append(r.Elems, fence.Reply{Type: '+', Str: s})
		}
		return r
	}
	num := func(n int64) fence.Reply { return fence.Reply{Type: ':', Int: n} }
	e := fence.Reply{Type: '*', Elems: []fence.Reply{{Type: '$', Str: name}, num(arity), strs(flags), num(first), num(last), num(step), strs(cats)}}
	if len(subs) > 0 {
		e.Elems = append(e.Elems, strs(nil), fence.Reply{Type: '*'}, fence.Reply{Type: '*', Elems: subs})
	}
	return e
}

// TestClassesFromFlagsAndCategories: the class of an entry follows its
// flags and categories, the server's special cases and the exceptions, for
// commands and subcommands alike; no server is needed.
func TestClassesFromFlagsAndCategories(t *testing.T) {
	cases := []struct {
		e     fence.Reply
		want  Class
		label string
	}{
		{entry("get", 2, []string{"readonly", "fast"}, []string{"@read", "@string", "@fast"}, 1, 1, 1), ClassOpen, "GET"},
		{entry("flushdb", -1, []string{"write"}, []string{"@keyspace", "@write", "@slow", "@dangerous"}, 0, 0, 0), ClassDangerous, "FLUSHDB"},
		{entry("keys", 2, []string{"readonly"}, []string{"@keyspace", "@read", "@slow", "@dangerous"}, 0, 0, 0), ClassOpen, "KEYS"},
		{entry("blpop", -3, []string{"write", "blocking"}, []string{"@list", "@blocking"}, 1, -2, 1), ClassBlocking, "BLPOP"},
		{entry("monitor", 1, []string{"admin", "noscript"}, []string{"@admin", "@dangerous"}, 0, 0, 0), ClassReply, "MONITOR"},
		{entry("subscribe", -2, []string{"pubsub", "noscript"}, []string{"@pubsub"}, 0, 0, 0), ClassReply, "SUBSCRIBE"},
		{entry("lastsave", 1, []string{"fast"}, []string{"@admin", "@dangerous"}, 0, 0, 0), ClassAdmin, "LASTSAVE"},
		{entry("client|kill", -3, []string{"admin", "noscript"}, []string{"@admin", "@connection", "@dangerous"}, 0, 0, 0), ClassAdmin, "CLIENT KILL"},
		{entry("watch", -2, []string{"noscript"}, []string{"@transaction"}, 1, -1, 1), ClassOpen, "WATCH"},
		{entry("readonly", 1, []string{"noscript"}, []string{"@connection"}, 0, 0, 0), ClassNoscript, "READONLY"},
	}
	for _, tc := range cases {
		name, e := parseCommandEntry(tc.e)
		if e == nil {
			t.Fatalf("%s: no entry", tc.e.Elems[0].Str)
		}
		if e.Class != tc.want || e.Label != tc.label {
			t.Errorf("%s: class %v label %q, want %v %q", name, e.Class, e.Label, tc.want, tc.label)
		}
	}

	acl := entry("acl", -2, nil, []string{"@slow"}, 0, 0, 0,
		entry("acl|getuser", 3, []string{"admin", "noscript"}, []string{"@admin", "@dangerous"}, 0, 0, 0),
		entry("acl|whoami", 2, []string{"noscript"}, []string{"@slow"}, 0, 0, 0))
	_, e := parseCommandEntry(acl)
	get := e.Subs["getuser"]
	if get == nil || get.Class != ClassSecret || get.Label != "ACL GETUSER" || get.Parent != "ACL" {
		t.Fatalf("acl|getuser: %+v", get)
	}
	if why := get.Class.Why(get); why != secretCommands["acl|getuser"] {
		t.Errorf("acl|getuser: why %q", why)
	}
	if !ClassAdmin.Openable() || !ClassNoscript.Openable() || ClassSecret.Openable() || ClassReply.Openable() {
		t.Error("only admin, dangerous and noscript open")
	}
}

// TestStoreMergesFirstWins: a table merged later adds only the commands
// the store does not have; lookups find subcommands, case-insensitively;
// the legacy first, last, step give key positions.
func TestStoreMergesFirstWins(t *testing.T) {
	var ks Store
	if ks.Index() != nil || ks.Table() != nil || ks.Lookup([][]byte{[]byte("GET")}) != nil {
		t.Fatal("an empty store has a table")
	}
	parse := func(es ...fence.Reply) Table {
		tab := Table{}
		for _, e := range es {
			name, ck := parseCommandEntry(e)
			tab[name] = ck
		}
		return tab
	}
	ks.Merge(parse(entry("mset", -3, []string{"write"}, nil, 1, -1, 2),
		entry("client", -2, nil, nil, 0, 0, 0, entry("client|setinfo", -4, nil, nil, 0, 0, 0))))
	ks.Merge(parse(entry("mset", 2, nil, nil, 0, 0, 0), entry("emq.enqueue", -3, []string{"write"}, nil, 0, 0, 0)))
	args := [][]byte{[]byte("mSeT"), []byte("a"), []byte("1"), []byte("b"), []byte("2")}
	ck := ks.Lookup(args)
	if ck == nil || ck.Arity != -3 {
		t.Fatalf("mset: %+v, want the first table's", ck)
	}
	if got := ck.Positions(args, nil); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("mset positions %v", got)
	}
	if ks.Lookup([][]byte{[]byte("EMQ.ENQUEUE")}) == nil {
		t.Error("the second table's command is missing")
	}
	if sc := ks.Lookup([][]byte{[]byte("CLIENT"), []byte("SETINFO")}); sc == nil || sc.Name != "client|setinfo" {
		t.Errorf("client setinfo: %+v", sc)
	}
	if !ks.SetInfo() {
		t.Error("the table has CLIENT SETINFO")
	}
}
