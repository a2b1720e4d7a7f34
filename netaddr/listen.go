package netaddr

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// DefaultMode is the mode of a Unix socket's file unless one is given:
// the owner and the group may connect, others not.
const DefaultMode fs.FileMode = 0o660

// ErrInUse is returned by Listen for a Unix socket another live process
// listens on.
var ErrInUse = errors.New("netaddr: another process listens on the socket")

// Listen listens on addr: TCP for host:port; for unix:/path a Unix socket
// whose file gets mode (its permission bits), after a stale file of a
// process that died without removing it is removed. A path another
// process still accepts on is refused (ErrInUse), as is one that is not a
// socket. The listener removes its file when it is closed.
func Listen(addr string, mode fs.FileMode) (net.Listener, error) {
	network, path, err := Parse(addr)
	if err != nil {
		return nil, err
	}
	if network == "tcp" {
		return net.Listen(network, path)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The file takes the process's umask at bind, and mode right after,
	// before the first Accept. A connection made in between is queued
	// under the umask's permissions: a service's umask (systemd's UMask=)
	// at least as strict as mode closes that gap.
	if err := os.Chmod(path, mode.Perm()); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("netaddr: chmod %s: %w", path, err)
	}
	return ln, nil
}

// removeStale removes the socket file at path when no process accepts on
// it any more; nothing there is fine.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("netaddr: %s exists and is not a socket (%v); not replaced", path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return fmt.Errorf("%w: %s: stop it or choose another path", ErrInUse, path)
	}
	// Only a refused connection proves the file stale: no process holds
	// a listening socket bound to it. Any other failure (permission, a
	// full backlog, a timeout) leaves the file alone.
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("netaddr: %s: cannot tell whether the socket is in use, not replaced: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("netaddr: remove stale socket %s: %w", path, err)
	}
	return nil
}
