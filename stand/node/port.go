package node

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The stand's ports.
//
// A server the stand starts may be killed and started again on the same
// port (Restart, Rejoin), and a test may count on nothing answering on that
// port meanwhile (a proxy must see its node down). A port asked of the
// kernel (a listen on port 0) is no good for that: once its server is down,
// the kernel may hand it to any listen on port 0 on the machine, another
// test package's proxy, say, which then answers in its place, or keeps the
// server from coming back. So the stand takes its ports below the kernel's
// ephemeral range, where neither a listen on port 0 nor an outgoing
// connection's own port ever lands, and reserves each one by a lock on a
// file in a directory that every process of the stand run by the same user
// shares (flock: the kernel releases it when the process ends, however it
// ends). No library does this; it is a few lines of the standard library's
// calls. A port stays reserved until ReleasePort gives it back or the
// process ends: a process holds one open file per port it holds, so what
// starts servers for a test (StartT, StartHAT, StartTLS) gives their ports
// back at the test's cleanup, and a test binary run with -count=N, or a
// package that starts thousands of servers, neither runs out of the range
// nor of open files.

// portSpan is how many ports below the ephemeral range the stand uses.
const portSpan = 12000

var ports = struct {
	mu   sync.Mutex
	held map[int]*os.File // the lock files, open (and locked), by port
}{held: map[int]*os.File{}}

// FreePort returns a loopback port for a server of the stand: free now,
// below the kernel's ephemeral range, and reserved for this process, so
// that no other process of the stand, and no listen on port 0, takes it
// while its server is down. Where the ephemeral range leaves no room below
// it, it falls back to a port the kernel picks (without that guarantee).
func FreePort() (int, error) {
	lo, hi, ok := stablePorts()
	if !ok {
		return kernelPort()
	}
	dir := portDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("%w: free port: %v", ErrStart, err)
	}
	n := hi - lo + 1
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		if reserve(dir, port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("%w: free port: all %d ports from %d to %d are taken", ErrStart, n, lo, hi)
}

// portDir is the directory of the ports' lock files. One directory per
// user: another user's stand cannot lock files in it, and its servers'
// ports show up in reserve's listen check.
func portDir() string {
	return filepath.Join(os.TempDir(), "emqproxy-stand-ports-"+strconv.Itoa(os.Getuid()))
}

// FreeAddr is FreePort as a loopback address.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// reserve takes port's lock and checks that nothing listens on it; it keeps
// the lock when both hold.
func reserve(dir string, port int) bool {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close() // another process of the stand, or this one, holds it
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		_ = f.Close() // something outside the stand listens there
		return false
	}
	_ = l.Close()
	ports.mu.Lock()
	ports.held[port] = f
	ports.mu.Unlock()
	return true
}

// ReleasePort gives back a port FreePort reserved, once nothing of this
// process listens on it or will again (its server stopped for good): any
// process of the stand may take it next. A port this process does not hold
// is ignored.
func ReleasePort(port int) {
	ports.mu.Lock()
	f := ports.held[port]
	delete(ports.held, port)
	ports.mu.Unlock()
	if f != nil {
		_ = f.Close() // the lock goes with the file
	}
}

// stablePorts returns the stand's range: the portSpan ports below the
// kernel's ephemeral range, and above the privileged ones.
func stablePorts() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	eph, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, false
	}
	hi = eph - 1
	lo = max(hi-portSpan+1, 1024)
	return lo, hi, hi-lo >= 1000
}

// kernelPort asks the kernel for a free loopback port and releases it.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("%w: free port: %v", ErrStart, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}
