package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// startAdminProxy runs the binary in front of upstream with the admin
// listener bound to adminHost (on a free port, reached through loopback)
// and the given lines of the admin section.
func startAdminProxy(t *testing.T, upstream, adminHost, adminLines string) *proc {
	t.Helper()
	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir()}
	_, port, _ := net.SplitHostPort(p.admin)
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
capture:
  dir: %q
admin:
  listen: %q
%s`, p.listen, p.mapPath, upstream, p.auditPath, filepath.Join(p.dir, "capture"), net.JoinHostPort(adminHost, port), adminLines)
	cfgPath := filepath.Join(p.dir, "emqproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.run(t, cfgPath)
	return p
}

// adminDo sends one admin request, with a bearer token when token is set.
func (p *proc) adminDo(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The admin port on 0.0.0.0: without a token the state-changing endpoints
// are refused and the probes and metrics served; with one (from a file or
// the environment), a wrong token is 401 and the right one 200, and once
// configured it is required on a loopback listener too.
func TestServeAdminCredential(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})

	t.Run("no token on 0.0.0.0", func(t *testing.T) {
		p := startAdminProxy(t, up.Addr, "0.0.0.0", "")
		for _, path := range []string{"/reload", "/capture?action=start&queues=q", "/capture?action=stop"} {
			if code, body := p.adminDo(t, "POST", path, ""); code != http.StatusForbidden || !strings.Contains(body, "admin.token") {
				t.Errorf("POST %s: %d %q", path, code, body)
			}
		}
		for _, path := range []string{"/metrics", "/healthz", "/readyz", "/capture"} {
			if code, body := p.adminDo(t, "GET", path, ""); code != http.StatusOK {
				t.Errorf("GET %s: %d %q", path, code, body)
			}
		}
		log, _ := os.ReadFile(p.stderr.Name())
		if !strings.Contains(string(log), "no admin.token is set") {
			t.Errorf("no warning logged about the open admin listener:\n%s", log)
		}
	})

	const token = "s3cret-admin-token-0123"
	t.Run("token file on 0.0.0.0", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "admin-token")
		if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startAdminProxy(t, up.Addr, "0.0.0.0", "  token_file: "+file+"\n")
		for _, bad := range []string{"", "wrong-token-0123456789", token[:len(token)-1]} {
			if code, body := p.adminDo(t, "POST", "/reload", bad); code != http.StatusUnauthorized {
				t.Errorf("reload with token %q: %d %q", bad, code, body)
			}
			if code, body := p.adminDo(t, "POST", "/capture?action=start&queues=q", bad); code != http.StatusUnauthorized {
				t.Errorf("capture with token %q: %d %q", bad, code, body)
			}
		}
		if code, body := p.adminDo(t, "POST", "/reload", token); code != http.StatusOK {
			t.Errorf("reload with the token: %d %q", code, body)
		}
		if code, body := p.adminDo(t, "POST", "/capture?action=start&queues=q", token); code != http.StatusOK || !strings.Contains(body, `"running":true`) {
			t.Errorf("capture start with the token: %d %q", code, body)
		}
		if code, body := p.adminDo(t, "POST", "/capture?action=stop", token); code != http.StatusOK {
			t.Errorf("capture stop with the token: %d %q", code, body)
		}
		if code, _ := p.adminDo(t, "GET", "/metrics", ""); code != http.StatusOK {
			t.Errorf("/metrics needs no token: %d", code)
		}
		log, _ := os.ReadFile(p.stderr.Name())
		if strings.Contains(string(log), token) {
			t.Error("the token is in the log")
		}
	})

	t.Run("environment token on loopback", func(t *testing.T) {
		t.Setenv("EMQPROXY_ADMIN_TOKEN", token)
		p := startAdminProxy(t, up.Addr, "127.0.0.1", "")
		if code, body := p.adminDo(t, "POST", "/reload", ""); code != http.StatusUnauthorized {
			t.Errorf("reload without the token on loopback: %d %q", code, body)
		}
		if code, body := p.adminDo(t, "POST", "/reload", token); code != http.StatusOK {
			t.Errorf("reload with the token: %d %q", code, body)
		}
	})
}
