package main

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestStartsAndStopsOnSIGTERM runs the command as a child process, reads the
// address it prints, checks the node answers and is branded, then stops it
// with SIGTERM and checks the node is gone.
func TestStartsAndStopsOnSIGTERM(t *testing.T) {
	if os.Getenv("EMQNODE_CHILD") == "1" {
		if err := run([]string{"--role", "scripts", "--dir", os.Getenv("EMQNODE_DIR")}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStartsAndStopsOnSIGTERM$")
	cmd.Env = append(os.Environ(), "EMQNODE_CHILD=1", "EMQNODE_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed: %v", err)
	}
	m := regexp.MustCompile(`^scripts node (127\.0\.0\.1:\d+) \(pid (\d+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("unexpected first line %q", line)
	}
	addr := m[1]
	if got, err := node.RawDo(addr, "GET", node.VersionKey); err != nil || string(got) != "$12\r\nechomq:4.0.0\r\n" {
		t.Fatalf("brand %q %v", got, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("emqnode exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("emqnode did not exit after SIGTERM")
	}
	if _, err := node.RawDo(addr, "PING"); err == nil {
		t.Fatal("node still answers after emqnode exited")
	}
}
