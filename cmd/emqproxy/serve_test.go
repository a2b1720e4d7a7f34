package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// binary is the emqproxy binary built once for the tests that run it as an
// operator would: as a process, configured by a file, stopped by signals.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "emqproxy-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "emqproxy")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns a loopback address for a process a test starts: one of
// the stand's ports (node.FreePort).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := node.FreeAddr() // a process started on it may be restarted on it
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// proc is a running emqproxy serve.
type proc struct {
	cmd       *exec.Cmd
	listen    string
	admin     string
	dir       string
	mapPath   string
	auditPath string
	stderr    *os.File
}

// startProxy writes a configuration in front of upstream and runs the binary.
func startProxy(t *testing.T, upstream string, extra string) *proc {
	t.Helper()
	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir()}
	p.mapPath = filepath.Join(p.dir, "map.yaml")
	p.auditPath = filepath.Join(p.dir, "audit.log")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), p.mapPath)
	cfg := fmt.Sprintf(`listen: %q
map: %q
upstreams:
  module-a:
    address: %q
    role: module
routes:
  - queues: ["*"]
    upstream: module-a
audit:
  sink: %q
admin:
  listen: %q
timeouts:
  drain: 5s
%s`, p.listen, p.mapPath, upstream, p.auditPath, p.admin, extra)
	cfgPath := filepath.Join(p.dir, "emqproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.run(t, cfgPath)
	p.waitReady(t, true)
	return p
}

// run starts the binary on the configuration at cfgPath (see start) and
// waits until /readyz answers ready.
func (p *proc) run(t *testing.T, cfgPath string) {
	t.Helper()
	p.start(t, cfgPath)
	p.waitReady(t, true)
}

// start starts the binary on the configuration at cfgPath, its output in
// p.dir/stderr.log (printed when the test fails), and kills it at cleanup.
func (p *proc) start(t *testing.T, cfgPath string) {
	t.Helper()
	var err error
	if p.stderr, err = os.Create(filepath.Join(p.dir, "stderr.log")); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(binary, "serve", "--config", cfgPath)
	p.cmd.Stderr, p.cmd.Stdout = p.stderr, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_, _ = p.cmd.Process.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(p.stderr.Name())
			t.Logf("emqproxy log:\n%s", b)
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) get(path string) (int, string, error) {
	resp, err := http.Get("http://" + p.admin + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitReady polls /readyz until it answers ready (or not ready) or a deadline.
func (p *proc) waitReady(t *testing.T, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, err := p.get("/readyz")
		if err == nil && (code == 200) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never became ready=%v: %d %q %v", want, code, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric returns the value of one sample line of /metrics, e.g.
// `emqproxy_commands_total{decision="rewrite",token="ENQUEUE"}`.
func (p *proc) metric(t *testing.T, sample string) float64 {
	t.Helper()
	code, body, err := p.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func rawCommand(t *testing.T, addr string, args ...string) string {
	t.Helper()
	b, err := node.RawDo(addr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestServeMetricsMatchTheWorkload(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	p := startProxy(t, up.Addr, "")
	ctx := context.Background()

	c, err := legacy.Dial(ctx, legacy.Options{Addr: p.listen})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const jobs = 7
	for i := range jobs {
		if ok, err := c.Enqueue(ctx, "quotes", fmt.Sprintf("J%d", i), "payload"); err != nil || !ok {
			t.Fatalf("enqueue %d: %v %v", i, ok, err)
		}
	}
	for range 3 {
		if _, empty, err := c.Claim(ctx, "quotes", 30000); err != nil || empty {
			t.Fatalf("claim: %v %v", empty, err)
		}
	}
	unknown := strings.Repeat("ab", 20)
	if got := rawCommand(t, p.listen, "EVALSHA", unknown, "0"); !strings.HasPrefix(got, "-EMQREFUSED") {
		t.Fatalf("unknown sha: %q", got)
	}
	if got := rawCommand(t, p.listen, "FLUSHALL"); !strings.HasPrefix(got, "-DENIED") {
		t.Fatalf("FLUSHALL: %q", got)
	}
	if got := rawCommand(t, p.listen, "DEL", "{emq}:version"); !strings.HasPrefix(got, "-FENCE") {
		t.Fatalf("DEL version key: %q", got)
	}

	for sample, want := range map[string]float64{
		`emqproxy_commands_total{decision="rewrite",token="ENQUEUE"}`: jobs,
		`emqproxy_commands_total{decision="rewrite",token="CLAIM"}`:   3,
		`emqproxy_refusals_total{reason="unknown_script"}`:            1,
		`emqproxy_refusals_total{reason="denied"}`:                    1,
		`emqproxy_refusals_total{reason="version_key"}`:               1,
		`emqproxy_upstream_fenced{upstream="module-a"}`:               1,
	} {
		if got := p.metric(t, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	// Each legacy call is one batch: 10 carried a rewritten call.
	if got := p.metric(t, `emqproxy_batch_seconds_count{kind="rewrite"}`); got != jobs+3 {
		t.Errorf("rewrite batches = %v, want %d", got, jobs+3)
	}
	if in, out := p.metric(t, `emqproxy_client_bytes_total{direction="in"}`), p.metric(t, `emqproxy_client_bytes_total{direction="out"}`); in < 100 || out < 50 {
		t.Errorf("client bytes in %v out %v: not counted", in, out)
	}
	if got := p.metric(t, `emqproxy_client_connections_total`); got < 4 {
		t.Errorf("client connections total = %v, want at least 4", got)
	}
}

func TestServeReloadSwapsTheMapOrRefusesIt(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	p := startProxy(t, up.Addr, "")
	oldDigest := digestLabel(t, p)

	// A map that does not load is refused and the old one stays.
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), p.mapPath+".good")
	if err := os.WriteFile(p.mapPath, []byte("legacy_brand: x\nscripts: [{name: a, sha: nothex}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, "reload refused")
	if got := digestLabel(t, p); got != oldDigest {
		t.Fatalf("digest changed to %s after a refused reload", got)
	}

	// A valid map with a new source is swapped in, over the admin endpoint too.
	good, _ := os.ReadFile(p.mapPath + ".good")
	next := strings.Replace(string(good), "source:", "source: next-release #", 1)
	if err := os.WriteFile(p.mapPath, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+p.admin+"/reload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /reload = %d", resp.StatusCode)
	}
	newDigest := digestLabel(t, p)
	if newDigest == oldDigest {
		t.Fatal("digest unchanged after a reload of a changed map")
	}

	// The audit log holds every map event: the load at start, the refusal
	// and the swap with both digests; and the fence's first pass.
	stopAndFlush(t, p)
	audit, err := os.ReadFile(p.auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"msg":"map","map":"` + oldDigest + `"`,
		`"msg":"map_refused","map":"` + oldDigest + `"`,
		`"msg":"map","map":"` + newDigest + `","old_map":"` + oldDigest + `"`,
		`"msg":"fence","upstream":"module-a","role":"module","node":"module node","installed":false`,
	} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit log lacks %s:\n%s", want, audit)
		}
	}
}

// stopAndFlush stops the proxy with SIGTERM, which flushes its audit log.
func stopAndFlush(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("emqproxy exit: %v", err)
	}
}

// digestLabel is the digest label of the emqproxy_map_info sample whose value is 1.
func digestLabel(t *testing.T, p *proc) string {
	t.Helper()
	_, body, err := p.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^emqproxy_map_info\{digest="([0-9a-f]+)"\} 1$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no emqproxy_map_info sample at 1 in /metrics")
	}
	return m[1]
}

func waitLog(t *testing.T, p *proc, text string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(p.stderr.Name())
		if strings.Contains(string(b), text) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("log never said %q", text)
}

func TestServeDrainsOnSIGTERM(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	p := startProxy(t, up.Addr, "")
	// A client blocked in BLPOP holds a command in flight; SIGTERM must stop
	// the listener at once and end that command explicitly by the drain
	// deadline.
	nc, err := net.Dial("tcp", p.listen)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("*3\r\n$5\r\nBLPOP\r\n$4\r\nlist\r\n$1\r\n0\r\n")); err != nil {
		t.Fatal(err)
	}
	// Wait until the BLPOP reached the server.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(rawCommand(t, up.Addr, "INFO", "clients"), "blocked_clients:1") {
		if time.Now().After(deadline) {
			t.Fatal("BLPOP never blocked on the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused while draining.
	refused := false
	for time.Since(start) < 3*time.Second {
		c, err := net.DialTimeout("tcp", p.listen, 100*time.Millisecond)
		if err != nil {
			refused = true
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if !refused {
		t.Error("the listener still accepted connections after SIGTERM")
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after drain: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("emqproxy did not exit within the drain deadline")
	}
	// The blocked client was not left hanging: it got an explicit error
	// (its command's outcome is unknown to the proxy) or was closed.
	_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err == nil && !strings.HasPrefix(line, "-UPSTREAM ") {
		t.Errorf("the blocked client got %q, want an -UPSTREAM error or a closed connection", line)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("the blocked client was left hanging after the proxy exited")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("drain took %v with a 5s deadline", d)
	}
}
