package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// These tests run the shipped configurations with the real binary in front
// of real nodes: only the addresses are changed (by flags and by the
// environment overrides the artifacts document), so what is tested is the
// file an operator installs.

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

// envName is the environment variable overriding a key (viper's replacer).
func envName(key string) string {
	return config.EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// sidecar is a running `emqproxy serve`.
type sidecar struct {
	cmd            *exec.Cmd
	listen, admin  string
	stdout, stderr string // files
	exited         chan error
	token          string // the admin token sent with POST requests, when set
}

// startSidecar runs `emqproxy serve --config cfgPath` with the given extra
// arguments and environment, and waits until /readyz answers 200.
func startSidecar(t *testing.T, cfgPath string, args, env []string) *sidecar {
	t.Helper()
	bin := emqproxyBinary(t)
	dir := t.TempDir()
	s := &sidecar{
		listen: freeAddr(t), admin: freeAddr(t),
		stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr"),
		exited: make(chan error, 1),
	}
	outF, err := os.Create(s.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.Create(s.stderr)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, append([]string{"serve", "--config", cfgPath,
		"--listen", s.listen, "--admin.listen", s.admin}, args...)...)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = outF, errF
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.exited <- s.cmd.Wait()
		_ = outF.Close()
		_ = errF.Close()
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
	s.waitReady(t)
	return s
}

func (s *sidecar) logs() string {
	out, _ := os.ReadFile(s.stdout)
	errb, _ := os.ReadFile(s.stderr)
	return fmt.Sprintf("stdout:\n%s\nstderr:\n%s", out, errb)
}

func (s *sidecar) http(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.token != "" && method == "POST" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitReady polls /readyz until it answers 200, the process exits, or the
// deadline passes.
func (s *sidecar) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var code int
	var body string
	for time.Now().Before(deadline) {
		select {
		case err := <-s.exited:
			s.exited <- err
			t.Fatalf("emqproxy serve exited (%v) before it was ready\n%s", err, s.logs())
		default:
		}
		if code, body = s.http(t, "GET", "/readyz"); code == http.StatusOK {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Fatalf("/readyz never answered 200 (last: %d %q)\n%s", code, body, s.logs())
}

// stop sends SIGTERM and waits for a clean exit within limit.
func (s *sidecar) stop(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.exited:
		if err != nil {
			t.Errorf("emqproxy serve exited with %v after SIGTERM\n%s", err, s.logs())
		}
	case <-time.After(limit):
		t.Fatalf("emqproxy serve did not exit within %s of SIGTERM\n%s", limit, s.logs())
	}
	return time.Since(start)
}

// checkServing checks the admin endpoints, one command through the proxy,
// and the reload paths the artifacts use (SIGHUP, POST /reload). It returns
// the /metrics text.
func (s *sidecar) checkServing(t *testing.T, digest string, upstream string) string {
	t.Helper()
	if code, body := s.http(t, "GET", "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, metrics := s.http(t, "GET", "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		fmt.Sprintf(`emqproxy_map_info{digest=%q} 1`, digest),
		fmt.Sprintf(`emqproxy_upstream_fenced{upstream=%q} 1`, upstream),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if reply, err := node.RawDo(s.listen, "PING"); err != nil || string(reply) != "+PONG\r\n" {
		t.Errorf("PING through the proxy: %q, %v", reply, err)
	}
	// ExecReload=/bin/kill -HUP $MAINPID: the process reloads and stays up.
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitReady(t)
	if code, body := s.http(t, "POST", "/reload"); code != http.StatusOK {
		t.Errorf("POST /reload: %d %q", code, body)
	}
	return metrics
}

// auditRecords reads the JSON lines of an audit sink.
func auditRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(readFile(t, path), []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			continue // the operational log may share a stream in other setups
		}
		out = append(out, rec)
	}
	return out
}

func hasMapRecord(recs []map[string]any, digest string) bool {
	for _, r := range recs {
		if r["msg"] == "map" && r["map"] == digest {
			return true
		}
	}
	return false
}

// TestServeProductionExample runs examples/production.yaml as the systemd
// unit would, each upstream a node of its role, and stops it as systemd
// does, within TimeoutStopSec.
func TestServeProductionExample(t *testing.T) {
	emqproxyBinary(t) // build (or skip) before starting nodes
	cfg, err := config.Load(productionExample, nil)
	if err != nil {
		t.Fatal(err)
	}
	mapPath := filepath.Join(repoRoot, "stand", "map.yaml")
	m, err := shamap.Load(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for name, u := range cfg.Upstreams {
		role := node.Module
		if u.Role == config.RoleScripts {
			role = node.Scripts
		}
		n := node.StartT(t, node.Options{Role: role, Brand: m.LegacyBrand})
		env = append(env, envName("upstreams."+name+".address")+"="+n.Addr)
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	s := startSidecar(t, productionExample, []string{"--map", mapPath, "--audit.sink", audit}, env)
	s.checkServing(t, m.Digest, defaultRoute(cfg))

	u := parseUnit(t, readFile(t, unitFile))
	stop, _ := u.last("Service", "TimeoutStopSec")
	limit, err := time.ParseDuration(stop)
	if err != nil {
		t.Fatal(err)
	}
	took := s.stop(t, limit)
	t.Logf("stopped %s after SIGTERM (TimeoutStopSec %s, timeouts.drain %s)", took.Round(time.Millisecond), limit, cfg.Timeouts.Drain)
	if !hasMapRecord(auditRecords(t, audit), m.Digest) {
		t.Errorf("the audit file %s has no map record with digest %s", audit, m.Digest)
	}
}

// TestServeKubernetesConfig runs the ConfigMap's configuration and map as
// the sidecar does: the upstream password from the Secret's variable, the
// audit log on stdout, the operational log on stderr, GOMAXPROCS as set.
func TestServeKubernetesConfig(t *testing.T) {
	emqproxyBinary(t) // build (or skip) before starting nodes
	mf := loadManifests(t)
	sc, cfg, files := mf.sidecarConfig(t)
	dir := t.TempDir()
	write := func(path, key string) string {
		p := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(p, []byte(mf.configMap.Data[key]), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfgPath := write("emqproxy.yaml", files[sc.Args[slices.Index(sc.Args, "--config")+1]])
	mapPath := write(cfg.Map, files[cfg.Map])
	m, err := shamap.Load(mapPath)
	if err != nil {
		t.Fatal(err)
	}

	const password = "from-the-secret-value" // every Secret's value: an upstream password, the admin token
	var env []string
	for _, e := range sc.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env = append(env, e.Name+"="+password)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	for name := range cfg.Upstreams {
		n := node.StartT(t, node.Options{Role: node.Module, Password: password})
		env = append(env, envName("upstreams."+name+".address")+"="+n.Addr)
	}
	s := startSidecar(t, cfgPath, []string{"--map", mapPath}, env)
	// The admin token from its Secret is in force: a POST without it is
	// refused (401), even on the loopback listener the test binds.
	if code, body := s.http(t, "POST", "/reload"); code != http.StatusUnauthorized {
		t.Errorf("POST /reload without the admin token: %d %q", code, body)
	}
	s.token = password
	metrics := s.checkServing(t, m.Digest, defaultRoute(cfg))
	for _, name := range runtimeMetricsQueried(t) {
		if !strings.Contains(metrics, "\n"+name+" ") && !strings.Contains(metrics, "\n"+name+"{") {
			t.Errorf("the dashboard queries %s; /metrics does not expose it", name)
		}
	}
	s.stop(t, time.Duration(*mf.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second)

	if !hasMapRecord(auditRecords(t, s.stdout), m.Digest) {
		t.Errorf("stdout (audit.sink: stdout) has no map record with digest %s\n%s", m.Digest, s.logs())
	}
	if hasMapRecord(auditRecords(t, s.stderr), m.Digest) {
		t.Errorf("the audit log leaked onto stderr, the operational log's stream")
	}
	var gomaxprocs any
	for _, r := range auditRecords(t, s.stderr) {
		if r["msg"] == "started" {
			gomaxprocs = r["gomaxprocs"]
		}
	}
	if fmt.Sprint(gomaxprocs) != fmt.Sprint(cfg.Runtime.GOMAXPROCS) {
		t.Errorf("the sidecar started with gomaxprocs %v, runtime.gomaxprocs is %d\n%s", gomaxprocs, cfg.Runtime.GOMAXPROCS, s.logs())
	}
}

// defaultRoute is the upstream of cfg's last route, which matches every
// queue: where "any-queue" goes.
func defaultRoute(cfg *config.Config) string { return cfg.Routes[len(cfg.Routes)-1].Upstream }
