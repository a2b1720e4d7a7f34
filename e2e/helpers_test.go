package e2e

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// scenario is one scenario, written once and run on both paths.
type scenario func(t testing.TB, tr *Transcript)

// runBoth runs sc on a fresh scripts node (directly) and on a fresh module
// node behind a fresh proxy, both on srv, then compares the two transcripts. It also
// checks that no Lua write reached the module node. It returns both
// transcripts for checks of their own.
func runBoth(t *testing.T, srv node.Server, sc scenario) (scripts, proxied *Transcript) {
	t.Helper()
	m := LoadMap(t)
	t.Run(ScriptsPath, func(t *testing.T) {
		scripts = NewTranscript(t, testCtx(t), StartScripts(t, srv, m))
		sc(t, scripts)
		scripts.Finish()
	})
	t.Run(ProxyPath, func(t *testing.T) {
		proxied = NewTranscript(t, testCtx(t), StartProxied(t, srv, m))
		sc(t, proxied)
		proxied.Finish()
		noLuaWrites(t, proxied)
	})
	if t.Failed() {
		t.FailNow()
	}
	if diffs := Compare(scripts, proxied); len(diffs) > 0 {
		t.Fatal(FormatDiffs(ScriptsPath, ProxyPath, diffs))
	}
	return scripts, proxied
}

// noLuaWrites checks that the module node behind the proxy ran no script
// but the declared reads (EVALSHA_RO of stats and peek).
func noLuaWrites(t *testing.T, tr *Transcript) {
	t.Helper()
	st := tr.EndStats
	for _, name := range []string{"eval", "evalsha", "eval_ro", "fcall", "fcall_ro", "function|load"} {
		if st[name] != 0 {
			t.Errorf("the module node ran %s %d times through the proxy; only EVALSHA_RO of the reads may reach it", name, st[name])
		}
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func commandStats(t testing.TB, c valkey.Client) map[string]int64 {
	t.Helper()
	st, err := node.CommandStats(testCtx(t), c)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// delta returns after-before for every command either map names.
func delta(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, k := range slices.Concat(slices.Collect(maps.Keys(before)), slices.Collect(maps.Keys(after))) {
		if d := after[k] - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// want checks a typed reply: want(t, true)(c.Enqueue(ctx, q, id, p)).
func want[T comparable](t testing.TB, w T) func(T, error) {
	return func(got T, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("want %v, got error %v", w, err)
		}
		if got != w {
			t.Fatalf("want %v, got %v", w, got)
		}
	}
}

// claims checks a claim: claims(t, job)(c.Claim(ctx, q, lease)).
func claims(t testing.TB, w legacy.Job) func(legacy.Job, bool, error) {
	return func(got legacy.Job, empty bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("claim: want %+v, got error %v", w, err)
		}
		if empty || got != w {
			t.Fatalf("claim: want %+v, got %+v (empty %v)", w, got, empty)
		}
	}
}

// claimsNothing checks an empty claim.
func claimsNothing(t testing.TB) func(legacy.Job, bool, error) {
	return func(got legacy.Job, empty bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("claim: want empty, got error %v", err)
		}
		if !empty {
			t.Fatalf("claim: want empty, got %+v", got)
		}
	}
}

// peeks checks a peek: peeks(t, row)(c.Peek(ctx, q, id)).
func peeks(t testing.TB, w legacy.Row) func(legacy.Row, bool, error) {
	return func(got legacy.Row, found bool, err error) {
		t.Helper()
		if err != nil || !found || got != w {
			t.Fatalf("peek: want %+v, got %+v (found %v, err %v)", w, got, found, err)
		}
	}
}

// lastStep returns the window of the transcript's last step.
func lastStep(tr *Transcript) Step {
	s := tr.Steps()
	return s[len(s)-1]
}

// expectKeys checks a snapshot against the exact keys a scenario expects.
// A zset member's score in want is checked exactly unless window is set
// for that key: then the score must lie in [window[0], window[1]].
func expectKeys(t testing.TB, p *Path, got Snapshot, want Snapshot, windows map[string][2]int64) {
	t.Helper()
	for _, name := range got.Names() {
		if _, ok := want[name]; !ok {
			t.Errorf("%s path: unexpected key %s = %s", p.Name, name, got[name])
		}
	}
	for _, name := range want.Names() {
		g, ok := got[name]
		w := want[name]
		switch {
		case !ok:
			t.Errorf("%s path: key %s absent, want %s", p.Name, name, w)
		case w.Type == "zset" && windows[name] != [2]int64{}:
			win := windows[name]
			if len(g.Members) != len(w.Members) {
				t.Errorf("%s path: key %s = %s, want %s", p.Name, name, g, w)
				continue
			}
			for i, m := range g.Members {
				if m.Name != w.Members[i].Name || m.Score < win[0] || m.Score > win[1] {
					t.Errorf("%s path: key %s = %s, want member %s at a score in [%d, %d]", p.Name, name, g, w.Members[i].Name, win[0], win[1])
				}
			}
		case g.String() != w.String():
			t.Errorf("%s path: key %s = %s, want %s", p.Name, name, g, w)
		}
	}
}

func row(state, attempts, payload string) Key {
	return Key{Type: "hash", Hash: map[string]string{"state": state, "attempts": attempts, "payload": payload}}
}

func zset(members ...Member) Key { return Key{Type: "zset", Members: members} }

// score checks a zset member's score on the path's node.
func score(t testing.TB, tr *Transcript, key, member string, w int64) {
	t.Helper()
	got, err := tr.Path.Direct.Do(testCtx(t), tr.Path.Direct.B().Zscore().Key(key).Member(member).Build()).AsInt64()
	if err != nil || got != w {
		t.Fatalf("%s path: ZSCORE %s %s = %d (err %v), want %d", tr.Path.Name, key, member, got, err, w)
	}
}

// withServer returns opts running on srv.
func withServer(opts node.Options, srv node.Server) node.Options {
	opts.Server = srv.Path
	return opts
}
