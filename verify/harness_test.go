package verify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/verify"
)

func standPaths(t *testing.T) (*shamap.Map, string) {
	t.Helper()
	root := node.RepoRoot()
	m, err := shamap.Load(filepath.Join(root, "stand", "map.yaml"))
	if err != nil {
		t.Fatalf("load map: %v", err)
	}
	return m, filepath.Join(root, "stand", "scripts")
}

// runHarness runs the whole harness against a fresh module node with AOF,
// restarting it through the node launcher for the restart check.
func runHarness(t *testing.T, srv node.Server, defs ...string) verify.Report {
	t.Helper()
	m, bodies := standPaths(t)
	opts := node.Options{Role: node.Module, AOF: true, ModuleDefs: defs, Server: srv.Path}
	n := node.StartT(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := verify.Run(ctx, verify.Config{
		Addr: n.Addr, Map: m, BodiesDir: bodies,
		Restart: func(context.Context) error { return n.Restart(opts) },
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(n.Dir, "server.log"))
		t.Fatalf("harness: %v\nserver log:\n%s", err, log)
	}
	t.Log("\n" + rep.String())
	return rep
}

// exactTokens are the tokens whose lease-exact cases the seed names.
var exactTokens = []string{"CLAIM", "EXTEND", "FAIL", "REAP", "PROMOTE"}

func TestHarnessIntegration(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testHarnessIntegration)
}

func testHarnessIntegration(t *testing.T, srv node.Server) {
	rep := runHarness(t, srv)
	if rep.Differing() != 0 {
		t.Errorf("%d differences, in %v", rep.Differing(), rep.DifferingTokens())
	}
	tokens := map[string]verify.TokenSummary{}
	for _, s := range rep.Tokens() {
		tokens[s.Token] = s
	}
	for _, tok := range append(slices.Clone(shamap.Tokens), "stats", "peek") {
		if tokens[tok].Cases == 0 {
			t.Errorf("no case for %s", tok)
		}
	}
	if rep.AOF.Status != verify.Equal {
		t.Errorf("AOF check: %s", rep.AOF)
	}
	if rep.Restart.Status != verify.Equal {
		t.Errorf("restart check: %s", rep.Restart)
	}
	checkLeaseExact(t, srv, rep)
	for _, c := range rep.Cases {
		if c.Status == verify.Skipped {
			t.Run(strings.ReplaceAll(c.Token+" "+c.Name, " ", "_"), func(t *testing.T) { t.Skip(c.Reason) })
		}
	}
}

// checkLeaseExact holds the lease-exact cases to the mode the server
// allows: on Valkey (a cached module clock) every one runs and is equal,
// scores included; on Redis 7.0 every one is skipped with the reason, and
// the report says the window rule applied.
func checkLeaseExact(t *testing.T, srv node.Server, rep verify.Report) {
	t.Helper()
	cached := srv.Kind == "valkey"
	if rep.CachedClock != cached {
		t.Errorf("%s: the harness detected cached clock %v, want %v", srv.Name, rep.CachedClock, cached)
	}
	wantMode := map[bool]string{true: "lease-exact mode: equal scores", false: "lease-exact mode: window"}[cached]
	if !strings.Contains(rep.String(), wantMode) {
		t.Errorf("the report does not say %q:\n%s", wantMode, rep)
	}
	perToken := map[string]int{}
	for _, c := range rep.Cases {
		if !c.Exact {
			continue
		}
		perToken[c.Token]++
		switch {
		case cached && c.Status != verify.Equal:
			t.Errorf("lease-exact %s %q on %s: status %v (%s) %v, want equal", c.Token, c.Name, srv.Name, c.Status, c.Reason, c.Diffs)
		case !cached && (c.Status != verify.Skipped || !strings.Contains(c.Reason, "no cached clock")):
			t.Errorf("lease-exact %s %q on %s: status %v (%s), want skipped for want of a cached clock", c.Token, c.Name, srv.Name, c.Status, c.Reason)
		}
	}
	for _, tok := range exactTokens {
		if perToken[tok] == 0 {
			t.Errorf("no lease-exact case for %s", tok)
		}
	}
}

// A module built with EMQ_BREAK_COMPLETE makes COMPLETE subtly wrong; the
// harness must report COMPLETE and nothing else.
func TestHarnessCatchesBrokenVerbIntegration(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testHarnessCatchesBrokenVerbIntegration)
}

func testHarnessCatchesBrokenVerbIntegration(t *testing.T, srv node.Server) {
	rep := runHarness(t, srv, "EMQ_BREAK_COMPLETE")
	if got := rep.DifferingTokens(); !slices.Equal(got, []string{"COMPLETE"}) {
		t.Errorf("differing tokens %v, want [COMPLETE]", got)
	}
}

// The harness refuses to measure when a body does not hash to its pin, and
// names the script; it does so before touching the server.
func TestRefusesChangedBody(t *testing.T) {
	m, bodies := standPaths(t)
	dir := t.TempDir()
	entries, err := os.ReadDir(bodies)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".lua") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(bodies, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "complete.lua" {
			data[len(data)-2] ^= 0x20 // one byte changed
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = verify.Run(context.Background(), verify.Config{Addr: "127.0.0.1:1", Map: m, BodiesDir: dir})
	if !errors.Is(err, verify.ErrPin) {
		t.Fatalf("Run with a changed body: err %v, want ErrPin", err)
	}
	if !strings.Contains(err.Error(), "complete:") || strings.Contains(err.Error(), "enqueue") {
		t.Errorf("error does not name exactly the changed script: %v", err)
	}
}

// A keyspace with other keys is refused unless forced.
func TestRefusesNonEmptyKeyspaceIntegration(t *testing.T) {
	node.EachServer(t, testRefusesNonEmptyKeyspaceIntegration)
}

func testRefusesNonEmptyKeyspaceIntegration(t *testing.T, srv node.Server) {
	m, bodies := standPaths(t)
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	if _, err := node.RawDo(n.Addr, "SET", "operator:data", "1"); err != nil {
		t.Fatal(err)
	}
	_, err := verify.Run(context.Background(), verify.Config{Addr: n.Addr, Map: m, BodiesDir: bodies})
	if !errors.Is(err, verify.ErrNotEmpty) {
		t.Fatalf("Run on a non-empty keyspace: err %v, want ErrNotEmpty", err)
	}
}

// A node without the module's brand is refused.
func TestRefusesScriptsNodeIntegration(t *testing.T) {
	node.EachServer(t, testRefusesScriptsNodeIntegration)
}

func testRefusesScriptsNodeIntegration(t *testing.T, srv node.Server) {
	m, bodies := standPaths(t)
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	_, err := verify.Run(context.Background(), verify.Config{Addr: n.Addr, Map: m, BodiesDir: bodies})
	if !errors.Is(err, verify.ErrNotScratch) {
		t.Fatalf("Run on a scripts node: err %v, want ErrNotScratch", err)
	}
}
