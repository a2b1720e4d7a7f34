package node

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestServersTable(t *testing.T) {
	ss := Servers()
	if len(ss) != 2 || ss[0].Kind != "redis" || ss[1].Kind != "valkey" {
		t.Fatalf("table %+v, want redis then valkey", ss)
	}
	r := Redis()
	if !r.Available() {
		t.Fatalf("redis-server: %v", r.Err)
	}
	if !regexp.MustCompile(`^redis-\d+\.\d+\.\d+$`).MatchString(r.Name) || r.Name != "redis-"+r.Version {
		t.Errorf("redis entry named %q (version %q)", r.Name, r.Version)
	}
	v := Valkey()
	switch {
	case v.Available():
		if !regexp.MustCompile(`^valkey-\d+\.\d+\.\d+$`).MatchString(v.Name) || !filepath.IsAbs(v.Path) {
			t.Errorf("valkey entry %+v", v)
		}
	case v.Name != "valkey" || !errors.Is(v.Err, ErrNoServer) && !errors.Is(v.Err, ErrValkeyBuild):
		t.Errorf("unavailable valkey entry %+v", v)
	}
}

// fakeServer writes an executable that answers --version with line.
func fakeServer(t *testing.T, line string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "server")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+line+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDescribeNamesTheServerByItsVersion(t *testing.T) {
	s := describe(fakeServer(t, "Valkey server v=8.0.1 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1"), "valkey")
	if s.Err != nil || s.Name != "valkey-8.0.1" || s.Version != "8.0.1" {
		t.Errorf("valkey: %+v", s)
	}
	// A Redis binary given as Valkey is refused, not mislabelled.
	s = describe(fakeServer(t, "Redis server v=7.0.15 sha=00000000:0"), "valkey")
	if !errors.Is(s.Err, ErrNoServer) || !strings.Contains(s.Err.Error(), "not valkey") {
		t.Errorf("redis binary as valkey: %+v", s)
	}
	s = describe(fakeServer(t, "hello"), "redis")
	if !errors.Is(s.Err, ErrNoServer) || s.Available() {
		t.Errorf("unknown binary: %+v", s)
	}
}

// writeTarball writes a source tarball whose top folder holds files.
func writeTarball(t *testing.T, files map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src.tar.gz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "valkey-x/" + name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// The build runs once per tarball: a second call finds the cached binary
// (the Makefile counts its runs in a file outside the cache).
func TestBuildValkeyIsCachedByChecksum(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	runs := filepath.Join(t.TempDir(), "runs")
	tb := writeTarball(t, map[string]string{"Makefile": "all:\n" +
		"\techo run >> " + runs + "\n" +
		"\tprintf '#!/bin/sh\\necho \"Valkey server v=0.0.1 sha=0\"\\n' > src/valkey-server\n" +
		"\tchmod +x src/valkey-server\n",
		"src/.keep": ""})
	bin, err := BuildValkey(tb, false)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ValkeyCacheDir(tb)
	if err != nil || filepath.Dir(bin) != dir || !strings.HasPrefix(dir, os.Getenv("XDG_CACHE_HOME")) {
		t.Fatalf("binary %s, cache entry %s %v", bin, dir, err)
	}
	if s := describe(bin, "valkey"); s.Name != "valkey-0.0.1" {
		t.Fatalf("built binary: %+v", s)
	}
	if again, err := BuildValkey(tb, true); err != nil || again != bin {
		t.Fatalf("second call: %s %v", again, err)
	}
	if data, _ := os.ReadFile(runs); string(data) != "run\n" {
		t.Errorf("make ran %q, want once", data)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "src-*")); len(left) != 0 {
		t.Errorf("sources left in the cache: %v", left)
	}
}

// A failed build says why, is recorded, and is not attempted again unless
// retried.
func TestBuildValkeyFailureIsRecorded(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	runs := filepath.Join(t.TempDir(), "runs")
	tb := writeTarball(t, map[string]string{"Makefile": "all:\n\techo run >> " + runs + "\n\t@echo 'fatal: no compiler here' && false\n"})
	_, err := BuildValkey(tb, false)
	if !errors.Is(err, ErrValkeyBuild) || !strings.Contains(err.Error(), "fatal: no compiler here") {
		t.Fatalf("failed build: %v", err)
	}
	_, err = BuildValkey(tb, false)
	if !errors.Is(err, ErrValkeyBuild) || !strings.Contains(err.Error(), "recorded in") {
		t.Fatalf("second call: %v", err)
	}
	if data, _ := os.ReadFile(runs); string(data) != "run\n" {
		t.Fatalf("make ran %q, want once before the retry", data)
	}
	if _, err := BuildValkey(tb, true); !errors.Is(err, ErrValkeyBuild) {
		t.Fatalf("retry: %v", err)
	}
	if data, _ := os.ReadFile(runs); string(data) != "run\nrun\n" {
		t.Errorf("make ran %q, want twice after the retry", data)
	}
}

func TestValkeyServerFromEnvironment(t *testing.T) {
	t.Setenv(EnvValkeyServer, "")
	t.Setenv(EnvValkeyTarball, "")
	if s := valkeyServer(); s.Available() || !strings.Contains(s.Err.Error(), "neither "+EnvValkeyServer) {
		t.Errorf("with neither variable: %+v", s)
	}
	t.Setenv(EnvValkeyServer, fakeServer(t, "Valkey server v=9.9.9 sha=0"))
	if s := valkeyServer(); s.Name != "valkey-9.9.9" {
		t.Errorf("VALKEY_SERVER: %+v", s)
	}
	t.Setenv(EnvValkeyServer, filepath.Join(t.TempDir(), "missing"))
	if s := valkeyServer(); s.Available() || !errors.Is(s.Err, ErrNoServer) {
		t.Errorf("VALKEY_SERVER missing: %+v", s)
	}
}
