package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestVerifyReportsTheBrokenVerbOnly runs `emqproxy verify` against a module
// node built with a deliberately broken COMPLETE: it must exit 1 and report
// COMPLETE, and only COMPLETE, as differing; on a sound build it exits 0.
func TestVerifyReportsTheBrokenVerbOnly(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testVerifyReportsTheBrokenVerbOnly)
}

func testVerifyReportsTheBrokenVerbOnly(t *testing.T, srv node.Server) {
	root := node.RepoRoot()
	run := func(n *node.Node) (string, int) {
		return runBinary(t, "verify", "--scratch", n.Addr,
			"--map", filepath.Join(root, "stand", "map.yaml"), "--bodies", filepath.Join(root, "stand", "scripts"))
	}

	broken := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module, ModuleDefs: []string{"EMQ_BREAK_COMPLETE"}})
	out, code := run(broken)
	if code != 1 {
		t.Fatalf("exit %d on a broken build, want 1:\n%s", code, out)
	}
	row := regexp.MustCompile(`(?m)^\s*([A-Za-z]+)\s+\d+\s+\d+\s+(\d+)\s+\d+\s+\d+$`)
	var differing []string
	for _, m := range row.FindAllStringSubmatch(out, -1) {
		if m[2] != "0" && m[1] != "total" {
			differing = append(differing, m[1])
		}
	}
	if strings.Join(differing, ",") != "COMPLETE" {
		t.Errorf("differing tokens %v, want [COMPLETE]:\n%s", differing, out)
	}

	sound := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	out, code = run(sound)
	if code != 0 || !strings.Contains(out, "every case equal") {
		t.Errorf("exit %d on a sound build:\n%s", code, out)
	}
	// It says how it judged the lease-exact cases: equal scores where the
	// server has a cached module clock (Valkey), the window on Redis 7.0.
	mode := map[string]string{"valkey": "lease-exact mode: equal scores", "redis": "lease-exact mode: window"}[srv.Kind]
	if !strings.Contains(out, mode) {
		t.Errorf("the report does not say %q:\n%s", mode, out)
	}
}
