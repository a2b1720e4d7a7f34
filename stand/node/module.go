package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// RepoRoot returns the repository root, found from this source file's path.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// ModuleDir returns the directory holding the module source (stand/module).
func ModuleDir() string { return filepath.Join(RepoRoot(), "stand", "module") }

// BuildModule builds stand/module/emq.c with gcc into
// stand/module/build/emq[-<defs>].so when the library is missing or older
// than any .c or .h file of stand/module, and returns its absolute path.
// defs are extra -D flags (test builds). Concurrent callers, in one process
// or several, are serialised by a lock file; the library is written under a
// temporary name and renamed into place, so a reader never sees half a file.
func BuildModule(defs ...string) (string, error) {
	dir := ModuleDir()
	src := filepath.Join(dir, "emq.c")
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNoModuleSource, src, err)
	}
	outDir := filepath.Join(dir, "build")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBuild, err)
	}
	// The build directory holds only build products; keep it out of git.
	ignore := filepath.Join(outDir, ".gitignore")
	if _, err := os.Stat(ignore); errors.Is(err, os.ErrNotExist) {
		_ = os.WriteFile(ignore, []byte("*\n"), 0o644)
	}
	out := filepath.Join(outDir, soName(defs))

	if fresh, err := isFresh(out, dir); err != nil || fresh {
		return out, err
	}
	unlock, err := lockFile(filepath.Join(outDir, ".lock"))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBuild, err)
	}
	defer unlock()
	fresh, err := isFresh(out, dir) // another process may have built it meanwhile
	if err != nil || fresh {
		return out, err
	}

	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	args := []string{"-O2", "-fPIC", "-shared", "-std=c99", "-Wall", "-Wextra"}
	for _, d := range defs {
		args = append(args, "-D"+d)
	}
	args = append(args, "-o", tmp, "emq.c")
	cmd := exec.Command("gcc", args...)
	cmd.Dir = dir
	msg, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("%w: gcc %s: %v\n%s", ErrBuild, strings.Join(args, " "), err, msg)
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("%w: %v", ErrBuild, err)
	}
	return out, nil
}

// soName is emq.so, or emq-<defs>.so with each define made file-name safe.
func soName(defs []string) string {
	if len(defs) == 0 {
		return "emq.so"
	}
	parts := make([]string, len(defs))
	for i, d := range defs {
		parts[i] = strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
				return r
			}
			return '_'
		}, d)
	}
	return "emq-" + strings.Join(parts, "-") + ".so"
}

// isFresh reports whether out exists and is not older than any .c or .h
// file in srcDir.
func isFresh(out, srcDir string) (bool, error) {
	st, err := os.Stat(out)
	if err != nil {
		return false, nil
	}
	var newest time.Time
	for _, pat := range []string{"*.c", "*.h"} {
		files, err := filepath.Glob(filepath.Join(srcDir, pat))
		if err != nil {
			return false, fmt.Errorf("%w: %v", ErrBuild, err)
		}
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil && fi.ModTime().After(newest) {
				newest = fi.ModTime()
			}
		}
	}
	return !st.ModTime().Before(newest), nil
}

// lockFile takes an exclusive flock on path and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
