package netaddr

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sockPath is a socket path short enough for sun_path (a test's TempDir
// may not be).
func sockPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "na")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

func TestParse(t *testing.T) {
	for _, tc := range []struct{ addr, network, address string }{
		{"127.0.0.1:6380", "tcp", "127.0.0.1:6380"},
		{"[::1]:6380", "tcp", "[::1]:6380"},
		{"unix:/run/e.sock", "unix", "/run/e.sock"},
	} {
		n, a, err := Parse(tc.addr)
		if err != nil || n != tc.network || a != tc.address {
			t.Errorf("Parse(%q) = %q %q %v", tc.addr, n, a, err)
		}
	}
	for _, bad := range []string{"", "localhost", "unix:", "unix:rel.sock", "unix:/" + strings.Repeat("x", 107)} {
		if _, _, err := Parse(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestListenUnixModeAndRemoval: the file gets the mode asked, whatever the
// umask, serves, and is gone once the listener is closed.
func TestListenUnixModeAndRemoval(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, mode := range []fs.FileMode{0o660, 0o600, 0o666} {
		p := sockPath(t)
		ln, err := Listen("unix:"+p, mode)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != mode {
			t.Errorf("mode %v, want a socket with %#o", fi.Mode(), mode)
		}
		go func() {
			if c, err := ln.Accept(); err == nil {
				_, _ = c.Write([]byte("+OK\r\n"))
				_ = c.Close()
			}
		}()
		c, err := DialContext(context.Background(), &net.Dialer{Timeout: time.Second}, "unix:"+p)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		if _, err := c.Read(buf); err != nil || string(buf) != "+OK\r\n" {
			t.Errorf("read %q %v", buf, err)
		}
		_ = c.Close()
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket file still there after Close: %v", err)
		}
	}
}

// TestListenReplacesStaleSocket: a process killed while listening leaves
// its file; the next Listen on the path replaces it.
func TestListenReplacesStaleSocket(t *testing.T) {
	p := sockPath(t)
	killed := exec.Command(os.Args[0], "-test.run=^TestHelperListener$")
	killed.Env = append(os.Environ(), "NETADDR_HELPER_SOCK="+p)
	out, err := killed.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if _, err := out.Read(buf); err != nil || string(buf) != "listening" {
		t.Fatalf("helper: %q %v", buf, err)
	}
	if _, err := Listen("unix:"+p, DefaultMode); !errors.Is(err, ErrInUse) {
		t.Fatalf("Listen while the helper listens = %v, want ErrInUse", err)
	}
	_ = killed.Process.Kill()
	_ = killed.Wait()
	if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("the killed process left no socket file (%v): the test proves nothing", err)
	}
	ln, err := Listen("unix:"+p, DefaultMode)
	if err != nil {
		t.Fatalf("Listen over a stale file: %v", err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	c, err := net.Dial("unix", p)
	if err != nil {
		t.Fatalf("dial the new listener: %v", err)
	}
	_ = c.Close()
}

// TestHelperListener is the process TestListenReplacesStaleSocket kills.
func TestHelperListener(t *testing.T) {
	p := os.Getenv("NETADDR_HELPER_SOCK")
	if p == "" {
		t.Skip("run by TestListenReplacesStaleSocket")
	}
	ln, err := Listen("unix:"+p, DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

// TestListenRefusesLiveAndNonSocket: a path a live listener holds, or a
// file that is not a socket, is left alone.
func TestListenRefusesLiveAndNonSocket(t *testing.T) {
	p := sockPath(t)
	live, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := Listen("unix:"+p, DefaultMode); !errors.Is(err, ErrInUse) {
		t.Errorf("Listen on a live socket = %v, want ErrInUse", err)
	}
	if _, err := os.Lstat(p); err != nil {
		t.Errorf("the live listener's file was removed: %v", err)
	}

	f := sockPath(t)
	if err := os.WriteFile(f, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix:"+f, DefaultMode); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a regular file = %v", err)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "data" {
		t.Errorf("the regular file was touched: %q %v", b, err)
	}
}

func TestListenTCP(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", DefaultMode)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, ok := ln.Addr().(*net.TCPAddr); !ok {
		t.Errorf("addr %T", ln.Addr())
	}
}
