package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// editConfig rewrites p's configuration file, replacing old by new (once,
// and old must be there).
func editConfig(t *testing.T, p *proc, old, new string) {
	t.Helper()
	path := filepath.Join(p.dir, "emqproxy.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("the configuration has no %q:\n%s", old, b)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// postReload sends POST /reload and returns its status and body.
func (p *proc) postReload(t *testing.T) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+p.admin+"/reload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// dialRaw opens one client connection to the proxy, closed at cleanup.
func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// waitMetric polls /metrics until sample has the value want, or fails at a
// deadline.
func (p *proc) waitMetric(t *testing.T, sample string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := p.metric(t, sample)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", sample, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// denied asserts a DENIED refusal naming the command.
func (r rawReply) denied(command string) {
	r.t.Helper()
	if !strings.HasPrefix(r.got, "-DENIED ") || !strings.Contains(strings.ToUpper(r.got), "'"+command+"'") {
		r.t.Errorf("reply %q, want -DENIED naming %s", r.got, command)
	}
}

// TestServeReloadAppliesPolicyDenyOrRefusesTheWholeFile: a changed
// policy.deny is in force after a reload, on a connection kept open across
// it; a file that also changes listen is refused naming listen, over
// POST /reload and SIGHUP, and the running configuration (its deny list
// included) keeps serving; the refusal is counted. An empty list is the
// built-in one.
func TestServeReloadAppliesPolicyDenyOrRefusesTheWholeFile(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	p := startProxy(t, up.Addr, "policy:\n  deny: [FLUSHALL]\n")
	kept := dialRaw(t, p.listen)
	kept.do("SET", "k", "1").is("+OK\r\n")

	editConfig(t, p, "[FLUSHALL]", "[FLUSHALL, SET]")
	if code, body := p.postReload(t); code != 200 || body != "reloaded\n" {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	kept.do("SET", "k", "2").denied("SET")
	dialRaw(t, p.listen).do("SET", "k", "3").denied("SET")
	kept.do("GET", "k").is("$1\r\n1\r\n")
	if got := rawCommand(t, up.Addr, "GET", "k"); got != "$1\r\n1\r\n" {
		t.Errorf("the node holds k = %q after denied SETs", got)
	}
	if got := p.metric(t, `emqproxy_reloads_total{result="applied"}`); got != 1 {
		t.Errorf("applied reloads = %v, want 1", got)
	}

	// listen cannot change at run time: the whole file is refused, the
	// deny list that came with it too.
	editConfig(t, p, "[FLUSHALL, SET]", "[FLUSHALL]")
	elsewhere := freeAddr(t)
	editConfig(t, p, "listen: \""+p.listen+"\"", "listen: \""+elsewhere+"\"")
	code, body := p.postReload(t)
	if code != http.StatusUnprocessableEntity || body != "reload refused: config: a reload cannot change: listen; restart to apply\n" {
		t.Errorf("POST /reload = %d %q, want 422 naming listen", code, body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitMetric(t, `emqproxy_reloads_total{result="refused"}`, 2)
	if b, _ := os.ReadFile(p.stderr.Name()); strings.Count(string(b), "a reload cannot change: listen; restart to apply") != 2 {
		t.Errorf("the log does not hold both refusals, naming listen:\n%s", b)
	}
	kept.do("SET", "k", "4").denied("SET")
	dialRaw(t, p.listen).do("GET", "k").is("$1\r\n1\r\n")
	if got := p.metric(t, `emqproxy_config_last_reload_successful`); got != 0 {
		t.Errorf("emqproxy_config_last_reload_successful = %v after a refusal, want 0", got)
	}

	// Back to the listen the proxy runs with: the deny change applies.
	editConfig(t, p, "listen: \""+elsewhere+"\"", "listen: \""+p.listen+"\"")
	if code, body := p.postReload(t); code != 200 {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	kept.do("SET", "k", "5").is("+OK\r\n")
	if got := p.metric(t, `emqproxy_config_last_reload_successful`); got != 1 {
		t.Errorf("emqproxy_config_last_reload_successful = %v after an applied reload, want 1", got)
	}

	// An empty deny list is the built-in one (as the production example
	// says), not an empty one: FLUSHDB stays refused.
	editConfig(t, p, "[FLUSHALL]", "[]")
	if code, body := p.postReload(t); code != 200 {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	kept.do("FLUSHDB").denied("FLUSHDB")
	kept.do("SET", "k", "6").is("+OK\r\n")
}

// TestServeReloadAppliesAuth: a password added by a reload is required on
// the next command of a connection that never authenticated.
func TestServeReloadAppliesAuth(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	p := startProxy(t, up.Addr, "auth:\n  max_failures: 10\n")
	kept := dialRaw(t, p.listen)
	kept.do("SET", "a", "b").is("+OK\r\n")

	editConfig(t, p, "auth:\n", "auth:\n  password: s3cret\n")
	if code, body := p.postReload(t); code != 200 {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	kept.do("SET", "a", "c").is("-NOAUTH Authentication required.\r\n")
	kept.do("AUTH", "s3cret").is("+OK\r\n")
	kept.do("SET", "a", "d").is("+OK\r\n")
	stopAndFlush(t, p)
	log, err := os.ReadFile(p.stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"changed":["auth.password"]`) {
		t.Errorf("the log does not name the changed key:\n%s", log)
	}
	if strings.Contains(string(log), "s3cret") {
		t.Errorf("the log shows the password:\n%s", log)
	}
}

// TestServeConfigurationFailsClosed: with the local example,
// EMQPROXY_AUTH_PASSWORD (a key the file does not name) makes the proxy
// require it; a misspelt variable or key stops serve and config check,
// naming it.
func TestServeConfigurationFailsClosed(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	root := node.RepoRoot()
	local := filepath.Join(root, "deploy", "examples", "local.yaml")
	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir()}
	// Everything local.yaml points at this machine's fixed ports and the
	// repository's relative paths moves to the test's, by variable.
	t.Setenv("EMQPROXY_LISTEN", p.listen)
	t.Setenv("EMQPROXY_ADMIN_LISTEN", p.admin)
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS", up.Addr)
	t.Setenv("EMQPROXY_MAP", filepath.Join(root, "stand", "map.yaml"))
	t.Setenv("EMQPROXY_AUDIT_SINK", filepath.Join(p.dir, "audit.log"))
	t.Setenv("EMQPROXY_AUTH_PASSWORD", "s3cret")
	p.run(t, local)
	c := dialRaw(t, p.listen)
	c.do("SET", "a", "b").is("-NOAUTH Authentication required.\r\n")
	c.do("AUTH", "wrong").is("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
	c.do("AUTH", "s3cret").is("+OK\r\n")
	c.do("SET", "a", "b").is("+OK\r\n")
	stopAndFlush(t, p)

	t.Run("a misspelt variable", func(t *testing.T) {
		t.Setenv("EMQPROXY_AUTH_PASSWORD", "")
		t.Setenv("EMQPROXY_AUTH_PASWORD", "s3cret")
		for _, args := range [][]string{{"serve", "--config", local}, {"config", "check", "--config", local}} {
			out, code := runBinary(t, args...)
			want := "EMQPROXY_AUTH_PASWORD: names no configuration key (did you mean EMQPROXY_AUTH_PASSWORD?)"
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("emqproxy %s: exit %d, %q; want exit 1 saying %q", strings.Join(args, " "), code, out, want)
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("emqproxy %s shows the value: %q", args[0], out)
			}
		}
	})
	t.Run("a misspelt key", func(t *testing.T) {
		b, err := os.ReadFile(local)
		if err != nil {
			t.Fatal(err)
		}
		bad := filepath.Join(t.TempDir(), "emqproxy.yaml")
		if err := os.WriteFile(bad, append(b, "auth:\n  passwrod: s3cret\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"serve", "--config", bad}, {"config", "check", "--config", bad}} {
			out, code := runBinary(t, args...)
			want := "auth.passwrod: unknown key in " + bad + " (did you mean auth.password?)"
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("emqproxy %s: exit %d, %q; want exit 1 saying %q", strings.Join(args, " "), code, out, want)
			}
		}
	})
}
