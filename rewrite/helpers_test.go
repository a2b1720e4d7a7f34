package rewrite

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
)

// testMap loads the test map (testdata/map.yaml, bodies in testdata/scripts).
func testMap(t testing.TB) *shamap.Map {
	t.Helper()
	m, err := shamap.Load(filepath.Join("testdata", "map.yaml"))
	if err != nil {
		t.Fatalf("load test map: %v", err)
	}
	if bad := m.VerifyBodies(filepath.Join("testdata", "scripts")); len(bad) != 0 {
		t.Fatalf("test map does not match its bodies: %+v", bad)
	}
	return m
}

// argv turns strings into a command's arguments.
func argv(a ...string) [][]byte {
	out := make([][]byte, len(a))
	for i, s := range a {
		out[i] = []byte(s)
	}
	return out
}

// row is one case of a decision table. Zero-valued want fields are checked
// too: a Pass row asserts no reply, no effect and no reason.
type row struct {
	name string
	args []string
	st   State
	// policy tweaks
	users    map[string]string
	readonly bool
	deny     map[string]bool
	allow    map[string]bool // Policy.Allow
	db       int

	action  Action
	reply   string
	effect  Effect
	reason  Reason
	head    string
	replace int
	queue   string
	sha     string // checked when not empty
	user    string
	arg     string
	setName bool
}

// run checks every row against Decide.
func run(t *testing.T, rows []row) {
	t.Helper()
	m := testMap(t)
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p := &Policy{Map: m, Users: r.users, Deny: r.deny, Allow: r.allow, DB: r.db}
			if r.readonly {
				p.Unknown = ReadonlyUnknown
			}
			st := r.st
			args := argv(r.args...)
			orig := argv(r.args...)
			d := Decide(args, &st, p)
			for i := range args {
				if !bytes.Equal(args[i], orig[i]) {
					t.Fatalf("Decide modified args[%d]: %q", i, args[i])
				}
			}
			if !reflect.DeepEqual(st, r.st) {
				t.Fatalf("Decide modified the state")
			}
			if d.Action != r.action {
				t.Errorf("action = %v, want %v (reply %q)", d.Action, r.action, d.Reply)
			}
			if string(d.Reply) != r.reply {
				t.Errorf("reply = %q, want %q", d.Reply, r.reply)
			}
			if d.Effect != r.effect {
				t.Errorf("effect = %v, want %v", d.Effect, r.effect)
			}
			if d.Reason != r.reason {
				t.Errorf("reason = %q, want %q", d.Reason, r.reason)
			}
			if d.Head != r.head || d.Replace != r.replace {
				t.Errorf("head, replace = %q, %d, want %q, %d", d.Head, d.Replace, r.head, r.replace)
			}
			if string(d.Queue) != r.queue {
				t.Errorf("queue = %q, want %q", d.Queue, r.queue)
			}
			if r.sha != "" && d.SHA != r.sha {
				t.Errorf("sha = %q, want %q", d.SHA, r.sha)
			}
			if d.User != r.user {
				t.Errorf("user = %q, want %q", d.User, r.user)
			}
			if string(d.Arg) != r.arg || d.SetsName != r.setName {
				t.Errorf("arg, setsName = %q, %v, want %q, %v", d.Arg, d.SetsName, r.arg, r.setName)
			}
		})
	}
}
