package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
)

// StartT starts a node for a test: t.Fatal on error, stopped at cleanup and
// its port given back (port.go). When opts.Dir is empty the node lives in
// t.TempDir().
func StartT(t testing.TB, opts Options) *Node {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	n, err := Start(opts)
	if err != nil {
		t.Fatalf("start %s node: %v", opts.Role, err)
	}
	t.Cleanup(func() {
		reportFailed(t, n)
		if err := n.retire(); err != nil {
			t.Errorf("stop node %s: %v", n.Addr, err)
		}
	})
	return n
}

// logTail is how much of a server's log a failed test prints.
const logTail = 4 << 10

// reportFailed prints, when t failed, what each node said: its address,
// role and server, and the tail of its log, so that a failure on a machine
// nobody can log into explains itself.
func reportFailed(t testing.TB, nodes ...*Node) {
	t.Helper()
	if !t.Failed() {
		return
	}
	for _, n := range nodes {
		if n == nil || n.Dir == "" {
			continue
		}
		t.Logf("node %s (%s, %s, dir %s); the last %d bytes of its log:\n%s",
			n.Addr, n.Opts.Role, n.Opts.Server, n.Dir, logTail, n.LogTail(logTail))
	}
}

// LogTail returns the last max bytes of the node's server log (or why it
// cannot be read).
func (n *Node) LogTail(max int64) string {
	f, err := os.Open(filepath.Join(n.Dir, "server.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// StartHAT starts a primary, its replica and the sentinels for a test
// (StartHA): t.Fatal on error, every process stopped at cleanup and its
// port given back. When o.Dir is empty the stand lives in t.TempDir().
func StartHAT(t testing.TB, o HAOptions) *HA {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	h, err := StartHA(o)
	if err != nil {
		t.Fatalf("start HA stand: %v", err)
	}
	t.Cleanup(func() {
		reportFailed(t, append([]*Node{h.Primary, h.Replica}, h.Sentinels...)...)
		if err := h.Stop(); err != nil {
			t.Errorf("stop HA stand: %v", err)
		}
	})
	return h
}

// Client returns a valkey-go client to the node (client-side cache off,
// authenticated with the node's password), closed at the test's cleanup.
func (n *Node) Client(t testing.TB) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:  []string{n.Addr},
		DisableCache: true,
		Password:     n.Opts.Password,
	})
	if err != nil {
		t.Fatalf("client to %s: %v", n.Addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// CommandStats reads INFO commandstats and returns the calls per command,
// keyed by the lower-case command name as the server reports it
// ("get", "config|get", "emq.claim").
func CommandStats(ctx context.Context, c valkey.Client) (map[string]int64, error) {
	text, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("node: INFO commandstats: %w", err)
	}
	return ParseCommandStats(text)
}

// ParseCommandStats parses the text of INFO commandstats.
func ParseCommandStats(text string) (map[string]int64, error) {
	out := make(map[string]int64)
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("%w: commandstats line %q", ErrProtocol, line)
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: commandstats line %q", ErrProtocol, line)
				}
				out[strings.ToLower(name)] = calls
			}
		}
	}
	return out, nil
}

// EachServer runs f once per server of the table (Servers), each as a
// subtest named by the server ("redis-7.0.15", "valkey-8.0.1"), so one test
// body covers every server and its output says which server each run used.
// Valkey is optional on a test machine: when it cannot run here, its
// subtest is skipped with the reason, so a leg that did not run never reads
// as passed. Debian's redis-server is required: its absence fails the test.
func EachServer(t *testing.T, f func(t *testing.T, s Server)) {
	t.Helper()
	for _, s := range Servers() {
		t.Run(s.Name, func(t *testing.T) {
			if !s.Available() {
				if s.Kind == "redis" {
					t.Fatalf("%s: %v", s.Name, s.Err)
				}
				t.Skipf("%s leg skipped: %v", s.Kind, s.Err)
			}
			f(t, s)
		})
	}
}

// Long marks a test that takes seconds of real time (a failover, a move
// under load, a restart): `go test -short` (make check, the inner loop)
// skips it, make test runs it.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("takes seconds of real time: make test runs it, -short (make check) skips it")
	}
}

// EachServerParallel is EachServer with the servers' legs run at once: for
// tests whose time goes to the servers' own timers (a Sentinel's
// down-after and failover, a WAIT's timeout) rather than to the CPU, and
// whose legs share nothing but the test binary (each starts its own nodes
// on its own ports). The legs start when the test's own function returns,
// as any parallel subtest does, at most -parallel of them at a time
// (make test sets 4: only such timer-bound tests run in parallel). A leg
// must not call t.Setenv.
func EachServerParallel(t *testing.T, f func(t *testing.T, s Server)) {
	t.Helper()
	EachServer(t, func(t *testing.T, s Server) {
		t.Parallel()
		f(t, s)
	})
}

// PollTimeout bounds Poll's wait.
const PollTimeout = 15 * time.Second

// Poll waits until cond holds, checking every few milliseconds, and fails
// the test after PollTimeout, naming what it waited for.
func Poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	PollWithin(t, what, PollTimeout, cond)
}

// PollWithin is Poll with its own bound: for a wait whose length follows
// the machine's speed (megabytes through the proxy under the race
// detector), where the bound only keeps a broken run from hanging.
func PollWithin(t testing.TB, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting %v for %s", bound, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// FreezeT stops n (SIGSTOP) for a test and waits until the kernel reports
// it stopped; it is thawed at cleanup (a test may thaw it before).
func FreezeT(t testing.TB, n *Node) {
	t.Helper()
	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Thaw() })
	stat := fmt.Sprintf("/proc/%d/stat", n.PID())
	Poll(t, "the server to stop", func() bool {
		b, err := os.ReadFile(stat)
		if err != nil {
			return false
		}
		// pid (comm) state ...: the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		return i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
	})
}
