package node

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func buildOrSkip(t *testing.T, defs ...string) string {
	t.Helper()
	so, err := BuildModule(defs...)
	if errors.Is(err, ErrNoModuleSource) {
		t.Skipf("module not written yet: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return so
}

func TestSoName(t *testing.T) {
	if got := soName(nil); got != "emq.so" {
		t.Fatal(got)
	}
	if got := soName([]string{"EMQ_BREAK_COMPLETE", "X=1"}); got != "emq-EMQ_BREAK_COMPLETE-X_1.so" {
		t.Fatal(got)
	}
}

func TestBuildModuleIsCachedWhenFresh(t *testing.T) {
	so := buildOrSkip(t)
	st1, err := os.Stat(so)
	if err != nil {
		t.Fatal(err)
	}
	again, err := BuildModule()
	if err != nil || again != so {
		t.Fatalf("second build %q %v", again, err)
	}
	st2, err := os.Stat(so)
	if err != nil {
		t.Fatal(err)
	}
	if !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("fresh module rebuilt")
	}
}

func TestModuleNodeIsInstalled(t *testing.T) { EachServer(t, testModuleNodeIsInstalled) }

func testModuleNodeIsInstalled(t *testing.T, srv Server) {
	buildOrSkip(t)
	n := StartT(t, Options{Server: srv.Path, Role: Module})
	if got := get(t, n, VersionKey); got != "$12\r\nechomq:6.0.0\r\n" {
		t.Fatalf("brand %q", got)
	}
	if got := mustRaw(t, n, "EMQ.INSTALL", "1", VersionKey); got != ":0\r\n" {
		t.Fatalf("second install %q", got)
	}
	if err := n.Restart(Options{Role: Scripts, NoBrand: true}); err != nil {
		t.Fatal(err)
	}
	if got := mustRaw(t, n, "EMQ.INSTALL", "1", VersionKey); !strings.HasPrefix(got, "-ERR unknown command") {
		t.Fatalf("scripts node knows EMQ.INSTALL: %q", got)
	}
	// The restart kept the server: Valkey's INFO names it, Redis's not.
	info := mustRaw(t, n, "INFO", "server")
	if got := strings.Contains(info, "\r\nvalkey_version:"+srv.Version+"\r\n"); got != (srv.Kind == "valkey") {
		t.Fatalf("after a restart without Options.Server, INFO server names valkey %s: %v, want %v", srv.Version, got, srv.Kind == "valkey")
	}
}
