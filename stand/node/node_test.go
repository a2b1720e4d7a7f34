package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func get(t *testing.T, n *Node, key string) string {
	t.Helper()
	reply, err := RawDo(n.Addr, "GET", key)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return string(reply)
}

func mustRaw(t *testing.T, n *Node, args ...string) string {
	t.Helper()
	reply, err := RawDo(n.Addr, args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return string(reply)
}

func TestScriptsNodeIsBrandedWithLegacyBrand(t *testing.T) {
	EachServer(t, testScriptsNodeIsBrandedWithLegacyBrand)
}

func testScriptsNodeIsBrandedWithLegacyBrand(t *testing.T, srv Server) {
	n := StartT(t, Options{Server: srv.Path, Role: Scripts})
	if got := get(t, n, VersionKey); got != "$12\r\necho"+"mq:4.0.0\r\n" {
		t.Fatalf("brand reply %q", got)
	}
	if n.PID() == 0 || !n.Running() {
		t.Fatalf("node not running: pid %d", n.PID())
	}
	if !strings.HasPrefix(n.Addr, "127.0.0.1:") || n.Port == 0 {
		t.Fatalf("addr %q port %d", n.Addr, n.Port)
	}
}

func TestBrandOptions(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"custom brand", Options{Role: Scripts, Brand: "echomq:4.1.0"}, "$12\r\nechomq:4.1.0\r\n"},
		{"no brand", Options{Role: Scripts, NoBrand: true}, "$-1\r\n"},
		{"bare", Options{Role: Bare}, "$-1\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := StartT(t, tc.opts)
			if got := get(t, n, VersionKey); got != tc.want {
				t.Fatalf("GET %s = %q, want %q", VersionKey, got, tc.want)
			}
		})
	}
}

func TestRestartKeepsAOFData(t *testing.T) { EachServer(t, testRestartKeepsAOFData) }

func testRestartKeepsAOFData(t *testing.T, srv Server) {
	opts := Options{Role: Scripts, AOF: true, Server: srv.Path}
	n := StartT(t, opts)
	port, dir, pid := n.Port, n.Dir, n.PID()
	if got := mustRaw(t, n, "SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	if err := n.Restart(opts); err != nil {
		t.Fatal(err)
	}
	if n.Port != port || n.Dir != dir || n.PID() == pid {
		t.Fatalf("restart: port %d→%d dir %s→%s pid %d→%d", port, n.Port, dir, n.Dir, pid, n.PID())
	}
	if got := get(t, n, "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("after restart GET k = %q", got)
	}

	// A kill loses nothing either: appendfsync always.
	if got := mustRaw(t, n, "SET", "k2", "w"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if n.Running() {
		t.Fatal("running after Kill")
	}
	if err := n.Restart(opts); err != nil {
		t.Fatal(err)
	}
	if got := get(t, n, "k2"); got != "$1\r\nw\r\n" {
		t.Fatalf("after kill and restart GET k2 = %q", got)
	}
	if got := get(t, n, VersionKey); got != "$12\r\nechomq:4.0.0\r\n" {
		t.Fatalf("brand after restart %q", got)
	}
}

func TestRestartWithoutAOFStartsEmpty(t *testing.T) {
	n := StartT(t, Options{Role: Bare})
	mustRaw(t, n, "SET", "k", "v")
	if err := n.Restart(Options{Role: Bare}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, n, "k"); got != "$-1\r\n" {
		t.Fatalf("GET k = %q, want nil (no persistence)", got)
	}
}

func TestStopIsIdempotent(t *testing.T) {
	n, err := Start(Options{Role: Bare})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(n.Dir)
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := RawDo(n.Addr, "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	if err := n.Freeze(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Freeze on stopped node: %v", err)
	}
}

func TestPasswordAndACL(t *testing.T) { EachServer(t, testPasswordAndACL) }

func testPasswordAndACL(t *testing.T, srv Server) {
	n := StartT(t, Options{Server: srv.Path,
		Role:     Scripts,
		Password: "pw",
		ACL:      []string{"alice on >apw ~emq:{a}:* +@all"},
	})
	if got := mustRaw(t, n, "PING"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("unauthenticated PING = %q", got)
	}
	c := n.Client(t)
	ctx := context.Background()
	if v, err := c.Do(ctx, c.B().Get().Key(VersionKey).Build()).ToString(); err != nil || v != DefaultBrand {
		t.Fatalf("brand %q %v", v, err)
	}
	rc, err := dialRaw(n.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.close()
	if got, _ := rc.do("AUTH", "alice", "apw"); string(got) != "+OK\r\n" {
		t.Fatalf("AUTH alice: %q", got)
	}
	if got, _ := rc.do("SET", "other", "1"); !strings.HasPrefix(string(got), "-NOPERM") {
		t.Fatalf("alice SET outside her keys: %q", got)
	}
	if got, _ := rc.do("SET", "emq:{a}:x", "1"); string(got) != "+OK\r\n" {
		t.Fatalf("alice SET inside her keys: %q", got)
	}
}

func TestFreezeThaw(t *testing.T) { EachServer(t, testFreezeThaw) }

func testFreezeThaw(t *testing.T, srv Server) {
	n := StartT(t, Options{Server: srv.Path, Role: Bare})
	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	c, err := dialRaw(n.Addr, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err) // the kernel still accepts on a frozen server
	}
	if _, err := c.do("PING"); err == nil {
		t.Fatal("frozen node answered")
	}
	c.close()
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	if got := mustRaw(t, n, "PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after thaw %q", got)
	}
}

func TestRawDoFramesOneReply(t *testing.T) { EachServer(t, testRawDoFramesOneReply) }

func testRawDoFramesOneReply(t *testing.T, srv Server) {
	n := StartT(t, Options{Server: srv.Path, Role: Bare})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "+PONG\r\n"},
		{[]string{"GET", "missing"}, "$-1\r\n"},
		{[]string{"EVAL", "return {1,{2,'x'},false,''}", "0"}, "*4\r\n:1\r\n*2\r\n:2\r\n$1\r\nx\r\n$-1\r\n$0\r\n\r\n"},
		{[]string{"EVAL", "return {}", "0"}, "*0\r\n"},
		{[]string{"EVAL", "return redis.error_reply('EMQWIRE x')", "0"}, "-EMQWIRE x\r\n"},
		{[]string{"INCRBY", "n", "-7"}, ":-7\r\n"},
	}
	for _, tc := range cases {
		if got := mustRaw(t, n, tc.args...); got != tc.want {
			t.Errorf("%q: got %q want %q", tc.args, got, tc.want)
		}
	}
}

func TestReadReplyRESP3(t *testing.T) { EachServer(t, testReadReplyRESP3) }

func testReadReplyRESP3(t *testing.T, srv Server) {
	n := StartT(t, Options{Server: srv.Path, Role: Bare})
	c, err := dialRaw(n.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	hello, err := c.do("HELLO", "3")
	if err != nil || hello[0] != '%' {
		t.Fatalf("HELLO 3: %q %v", hello, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"GET", "missing"}, "_\r\n"},
		{[]string{"EVAL", "redis.setresp(3); return {double=1.5}", "0"}, ",1.5\r\n"},
		{[]string{"HSET", "h", "a", "1"}, ":1\r\n"},
		{[]string{"HGETALL", "h"}, "%1\r\n$1\r\na\r\n$1\r\n1\r\n"},
		{[]string{"PING"}, "+PONG\r\n"},
	} {
		got, err := c.do(tc.args...)
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: got %q %v want %q", tc.args, got, err, tc.want)
		}
	}
}

func TestCommandStats(t *testing.T) { EachServer(t, testCommandStats) }

func testCommandStats(t *testing.T, srv Server) {
	n := StartT(t, Options{Server: srv.Path, Role: Bare})
	c := n.Client(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := CommandStats(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if stats["set"] != 3 {
		t.Fatalf("set calls = %d, want 3 (%v)", stats["set"], stats)
	}
}

func TestParseCommandStats(t *testing.T) {
	got, err := ParseCommandStats("# Commandstats\r\ncmdstat_GET:calls=2,usec=3,usec_per_call=1.5\r\ncmdstat_config|get:calls=1,usec=1\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if got["get"] != 2 || got["config|get"] != 1 || len(got) != 2 {
		t.Fatalf("%v", got)
	}
	if _, err := ParseCommandStats("cmdstat_x:calls=z"); !errors.Is(err, ErrProtocol) {
		t.Fatalf("bad line: %v", err)
	}
}

func TestParallelStartsGetDistinctPorts(t *testing.T) {
	const k = 4
	nodes := make([]*Node, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = Start(Options{Role: Bare, Dir: t.TempDir()})
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range k {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { _ = nodes[i].Stop() })
		if seen[nodes[i].Port] {
			t.Fatalf("port %d used twice", nodes[i].Port)
		}
		seen[nodes[i].Port] = true
	}
}

func TestFixedPortInUseFails(t *testing.T) {
	a := StartT(t, Options{Role: Bare})
	_, err := Start(Options{Role: Bare, Port: a.Port, Dir: t.TempDir()})
	if !errors.Is(err, ErrStart) {
		t.Fatalf("start on a taken port: %v", err)
	}
	if got := mustRaw(t, a, "PING"); got != "+PONG\r\n" {
		t.Fatalf("first node disturbed: %q", got)
	}
}

func TestRoleNames(t *testing.T) {
	for _, r := range []Role{Scripts, Module, Bare} {
		got, err := ParseRole(r.String())
		if err != nil || got != r {
			t.Fatalf("ParseRole(%q) = %v %v", r.String(), got, err)
		}
	}
	if _, err := ParseRole("cluster"); err == nil {
		t.Fatal("ParseRole accepted an unknown role")
	}
}

// TestNodeDiesWithItsOwner starts a node from a child process, kills the
// child with SIGKILL and checks the node does not outlive it.
func TestNodeDiesWithItsOwner(t *testing.T) {
	if os.Getenv("NODE_OWNER_CHILD") == "1" {
		n, err := Start(Options{Role: Bare, Dir: os.Getenv("NODE_OWNER_DIR")})
		if err != nil {
			os.Exit(1)
		}
		fmt.Printf("%d %s\n", n.PID(), n.Addr)
		select {} // wait to be killed
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestNodeDiesWithItsOwner$")
	cmd.Env = append(os.Environ(), "NODE_OWNER_CHILD=1", "NODE_OWNER_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	var addr string
	if _, err := fmt.Fscan(bufio.NewReader(out), &pid, &addr); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("child printed no node: %v", err)
	}
	if got, err := RawDo(addr, "PING"); err != nil || string(got) != "+PONG\r\n" {
		t.Fatalf("child's node: %q %v", got, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("node pid %d outlived its owner", pid)
		}
		<-tick.C
	}
}
