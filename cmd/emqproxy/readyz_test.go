package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// readyzLine is every line /readyz may answer.
var readyzLine = regexp.MustCompile(`^(ready|not ready|upstream [a-z0-9_-]+: (ready|not ready: \S.*)|proxy: not ready: \S.*)$`)

// checkReadyz checks /readyz's body line by line: the verdict, then one
// line per upstream of want (name: ready or not) in that order, nothing
// else. It returns the not-ready upstreams' reasons.
func checkReadyz(t *testing.T, body string, verdict string, want [][2]string) map[string]string {
	t.Helper()
	if !strings.HasSuffix(body, "\n") {
		t.Fatalf("/readyz %q does not end with a line break", body)
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for _, l := range lines {
		if !readyzLine.MatchString(l) {
			t.Errorf("/readyz line %q has no stable form (body %q)", l, body)
		}
	}
	if len(lines) != 1+len(want) || lines[0] != verdict {
		t.Fatalf("/readyz = %q, want %q and a line for each of %v", body, verdict, want)
	}
	reasons := map[string]string{}
	for i, w := range want {
		prefix := "upstream " + w[0] + ": " + w[1]
		if !strings.HasPrefix(lines[i+1], prefix) {
			t.Errorf("/readyz line %d = %q, want %q...", i+1, lines[i+1], prefix)
		}
		if r, ok := strings.CutPrefix(lines[i+1], "upstream "+w[0]+": not ready: "); ok {
			reasons[w[0]] = r
		}
	}
	return reasons
}

// TestServeReadyzOneLinePerUpstream runs the binary on a module and a
// scripts upstream: /readyz names each on a line of its own, and the one
// that is gone says why, on that line.
func TestServeReadyzOneLinePerUpstream(t *testing.T) {
	node.EachServer(t, testReadyzOneLinePerUpstream)
}

func testReadyzOneLinePerUpstream(t *testing.T, srv node.Server) {
	mod := node.StartT(t, node.Options{Role: node.Module, Server: srv.Path})
	scr := node.StartT(t, node.Options{Role: node.Scripts, Server: srv.Path})
	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir()}
	p.mapPath = filepath.Join(p.dir, "map.yaml")
	p.auditPath = filepath.Join(p.dir, "audit.log")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), p.mapPath)
	cfgPath := filepath.Join(p.dir, "emqproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(routedConfig(p, mod.Addr, scr.Addr, billingOnScripts)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.run(t, cfgPath)
	code, body, err := p.get("/readyz")
	if err != nil || code != 200 {
		t.Fatalf("/readyz = %d %q %v", code, body, err)
	}
	checkReadyz(t, body, "ready", [][2]string{{"module-a", "ready"}, {"scripts-b", "ready"}})

	if err := scr.Kill(); err != nil {
		t.Fatal(err)
	}
	p.waitReady(t, false)
	code, body, err = p.get("/readyz")
	if err != nil || code != 503 {
		t.Fatalf("/readyz = %d %q %v", code, body, err)
	}
	t.Logf("/readyz: %d %q", code, body)
	reasons := checkReadyz(t, body, "not ready", [][2]string{{"module-a", "ready"}, {"scripts-b", "not ready: "}})
	if !strings.Contains(reasons["scripts-b"], "upstream: ") {
		t.Errorf("scripts-b's reason %q does not say what failed", reasons["scripts-b"])
	}
}
