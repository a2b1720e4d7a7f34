package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// The stand runs on two servers: Debian's redis-server (7.0.x), the default
// everywhere, and Valkey, the server production nodes run. Debian ships no
// Valkey, so its binary comes from the environment:
//
//   - VALKEY_SERVER names a valkey-server binary to use as is;
//   - otherwise VALKEY_TARBALL names a Valkey source tarball, built once per
//     machine into a cache outside the repository (see BuildValkey);
//   - with neither, Valkey is unavailable and every test of the Valkey leg
//     reports itself skipped with that reason.
//
// A relative path in either variable is taken from the repository root, so
// `VALKEY_TARBALL=../shared/vendor/valkey-8.0.1.tar.gz go test ./...` means
// the same file from every package directory.
const (
	EnvValkeyServer  = "VALKEY_SERVER"
	EnvValkeyTarball = "VALKEY_TARBALL"
)

// Server is one server binary of the stand's table.
type Server struct {
	// Name names the server in test names: "redis-7.0.15", "valkey-8.0.1";
	// "redis" or "valkey" when the binary is unavailable.
	Name string
	// Kind is "redis" or "valkey".
	Kind string
	// Version is the version the binary reports ("" when unavailable).
	Version string
	// Path is the binary's absolute path ("" when unavailable).
	Path string
	// Err says why the server cannot run here (nil when it can).
	Err error
}

// Available reports whether the server's binary was found (or built).
func (s Server) Available() bool { return s.Err == nil && s.Path != "" }

var (
	serversOnce sync.Once
	servers     []Server
)

// Servers returns the stand's table of servers, resolved once per process:
// Debian's redis-server first, then Valkey. An entry that cannot run here
// has Err set and stays in the table, so a test over the table reports it
// skipped rather than leaving it out silently.
func Servers() []Server {
	serversOnce.Do(func() {
		servers = []Server{redisServer(), valkeyServer()}
	})
	return append([]Server(nil), servers...)
}

// Redis returns the table's redis-server entry, the stand's default.
func Redis() Server { return Servers()[0] }

// Valkey returns the table's Valkey entry.
func Valkey() Server { return Servers()[1] }

func redisServer() Server {
	p, err := serverPath()
	if err != nil {
		return Server{Name: "redis", Kind: "redis", Err: err}
	}
	return describe(p, "redis")
}

func valkeyServer() Server {
	unavailable := func(err error) Server { return Server{Name: "valkey", Kind: "valkey", Err: err} }
	if p := os.Getenv(EnvValkeyServer); p != "" {
		abs, err := binaryPath(p)
		if err != nil {
			return unavailable(fmt.Errorf("%w: %s=%s: %v", ErrNoServer, EnvValkeyServer, p, err))
		}
		return describe(abs, "valkey")
	}
	if tb := os.Getenv(EnvValkeyTarball); tb != "" {
		p, err := BuildValkey(fromRoot(tb), false)
		if err != nil {
			return unavailable(err)
		}
		return describe(p, "valkey")
	}
	return unavailable(fmt.Errorf("%w: neither %s nor %s is set", ErrNoServer, EnvValkeyServer, EnvValkeyTarball))
}

// versionLine matches the first line of `redis-server --version` and
// `valkey-server --version`: "Redis server v=7.0.15 sha=..." and
// "Valkey server v=8.0.1 sha=...".
var versionLine = regexp.MustCompile(`^(Redis|Valkey) server v=([0-9][0-9A-Za-z.\-]*)`)

// describe runs the binary's --version and names the server by what it
// says it is. A binary that does not run, or is another server than the
// slot expects, is reported unavailable with the reason.
func describe(path, kind string) Server {
	s := Server{Name: kind, Kind: kind, Path: path}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		s.Err = fmt.Errorf("%w: %s --version: %v: %s", ErrNoServer, path, err, strings.TrimSpace(string(out)))
		return s
	}
	m := versionLine.FindStringSubmatch(strings.TrimSpace(string(out)))
	if m == nil {
		s.Err = fmt.Errorf("%w: %s --version answered %q", ErrNoServer, path, strings.TrimSpace(string(out)))
		return s
	}
	if got := strings.ToLower(m[1]); got != kind {
		s.Err = fmt.Errorf("%w: %s is a %s server, not %s", ErrNoServer, path, got, kind)
		return s
	}
	s.Version = m[2]
	s.Name = kind + "-" + s.Version
	return s
}

// fromRoot makes a relative path absolute from the repository root.
func fromRoot(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(RepoRoot(), p)
}

// binaryPath resolves a server binary: a bare name through PATH, anything
// else from the repository root; it must be an executable file.
func binaryPath(p string) (string, error) {
	if !strings.Contains(p, "/") {
		return exec.LookPath(p)
	}
	abs := fromRoot(p)
	st, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", errors.New("not an executable file")
	}
	return abs, nil
}
