package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// ErrValkeyBuild means the Valkey build from a source tarball failed (or
// failed before and has not been retried).
var ErrValkeyBuild = errors.New("node: valkey build failed")

// Files of a cache entry.
const (
	valkeyBinary = "valkey-server"
	valkeyLog    = "build.log"
	valkeyFailed = "build-failed" // the reason of the last failed build
)

// ValkeyCacheDir returns the cache entry of a Valkey source tarball:
// <user cache>/emqproxy/valkey-<first 16 hex digits of its sha256>, where the
// user cache is $XDG_CACHE_HOME or ~/.cache. It lies outside the repository
// on purpose: the build takes minutes, and every clone and worktree on the
// machine shares it; keying it by the tarball's checksum makes another
// tarball (or a changed one) a new entry rather than a stale hit.
func ValkeyCacheDir(tarball string) (string, error) {
	sum, err := fileSHA256(tarball)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrValkeyBuild, err)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no cache directory: %v", ErrValkeyBuild, err)
	}
	return filepath.Join(base, "emqproxy", "valkey-"+sum[:16]), nil
}

// BuildValkey returns the valkey-server built from the source tarball,
// building it first when its cache entry (ValkeyCacheDir) has none. The
// build unpacks the tarball into the entry, runs `make BUILD_TLS=no` (the
// allocator is bundled, nothing else is needed; about two minutes on two
// cores), keeps src/valkey-server and the build log, and removes the
// sources.
//
// Builders in several processes (the make target and test packages running
// in parallel) are serialised by a lock file in the entry, so the build runs
// once. A failed build records its reason in the entry and is not attempted
// again by later callers, which return that reason at once (a test process
// must not spend minutes on a build that is known to fail); retry makes the
// caller try again, as `make test`'s build step does.
func BuildValkey(tarball string, retry bool) (string, error) {
	dir, err := ValkeyCacheDir(tarball)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, valkeyBinary)
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrValkeyBuild, err)
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrValkeyBuild, err)
	}
	defer unlock()
	if isExecutable(bin) { // built by another process while this one waited
		return bin, nil
	}
	failed := filepath.Join(dir, valkeyFailed)
	if why, err := os.ReadFile(failed); err == nil && !retry {
		return "", fmt.Errorf("%w: %s (recorded in %s; `make test VALKEY_TARBALL=...` retries it)", ErrValkeyBuild, strings.TrimSpace(string(why)), failed)
	}
	_ = os.Remove(failed)
	if err := buildValkey(tarball, dir, bin); err != nil {
		_ = os.WriteFile(failed, []byte(err.Error()+"\n"), 0o644)
		return "", fmt.Errorf("%w: %v", ErrValkeyBuild, err)
	}
	return bin, nil
}

// buildValkey unpacks and builds under dir and moves the binary to bin.
func buildValkey(tarball, dir, bin string) error {
	work, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	logPath := filepath.Join(dir, valkeyLog)
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()

	untar := exec.Command("tar", "-xzf", tarball, "-C", work, "--strip-components=1")
	untar.Stdout, untar.Stderr = logf, logf
	if err := untar.Run(); err != nil {
		return fmt.Errorf("unpack %s: %v (log %s)", tarball, err, logPath)
	}
	mk := exec.Command("make", "-j"+strconv.Itoa(runtime.NumCPU()), "BUILD_TLS=no")
	mk.Dir = work
	mk.Stdout, mk.Stderr = logf, logf
	if err := mk.Run(); err != nil {
		return fmt.Errorf("make BUILD_TLS=no in %s: %v; the log ends:\n%s", tarball, err, tail(logPath, 20))
	}
	tmp := bin + ".tmp"
	if err := copyFile(filepath.Join(work, "src", valkeyBinary), tmp); err != nil {
		return err
	}
	if out, err := exec.Command(tmp, "--version").CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("the built server does not run: %v: %s", err, out)
	}
	return os.Rename(tmp, bin)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
