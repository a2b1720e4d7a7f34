package admin

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// listenT serves o on a real listener at addr, shut down at cleanup.
func listenT(t *testing.T, addr string, o Options) *Server {
	t.Helper()
	s, err := Listen(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// call sends one request to the server over TCP (through the loopback
// address for a wildcard listener) and returns the status and body.
func call(t *testing.T, s *Server, method, path, token string) (int, string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr())
	req, err := http.NewRequest(method, "http://127.0.0.1:"+port+path, nil)
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

func options(reloads *int) Options {
	return Options{
		Registry: prometheus.NewRegistry(),
		Ready:    func() error { return nil },
		Reload:   func() error { *reloads++; return nil },
		Capture:  func(CaptureRequest) ([]byte, error) { return []byte(`{"running":false}`), nil },
		Pprof:    true,
	}
}

// On a listener that is not loopback-only and no token, the state-changing
// endpoints are refused with a body saying how to open them; the probes,
// the metrics and the capture's status are served.
func TestWildcardListenerWithoutTokenRefusesChanges(t *testing.T) {
	reloads := 0
	s := listenT(t, "0.0.0.0:0", options(&reloads))
	if s.LoopbackOnly() {
		t.Fatal("0.0.0.0 taken for loopback")
	}
	for _, c := range []struct{ method, path string }{
		{"POST", "/reload"}, {"POST", "/capture?action=start"}, {"POST", "/capture?action=stop"},
		{"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/cmdline"},
	} {
		code, body := call(t, s, c.method, c.path, "")
		if code != http.StatusForbidden || !strings.Contains(body, "admin.token") || !strings.Contains(body, "loopback") {
			t.Errorf("%s %s: %d %q", c.method, c.path, code, body)
		}
	}
	if reloads != 0 {
		t.Errorf("%d reloads ran", reloads)
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/capture"} {
		if code, body := call(t, s, "GET", path, ""); code != http.StatusOK {
			t.Errorf("GET %s: %d %q", path, code, body)
		}
	}
}

// With a token, every state-changing request needs it, on any listener:
// none or a wrong one is 401, the right one passes.
func TestTokenRequiredWhenConfigured(t *testing.T) {
	const token = "0123456789abcdef-admin"
	for _, addr := range []string{"0.0.0.0:0", "127.0.0.1:0"} {
		t.Run(addr, func(t *testing.T) {
			reloads := 0
			o := options(&reloads)
			o.Token = token
			s := listenT(t, addr, o)
			if got := s.LoopbackOnly(); got != strings.HasPrefix(addr, "127.") {
				t.Errorf("LoopbackOnly %v", got)
			}
			for _, bad := range []string{"", "wrong", token + "x", token[:len(token)-1]} {
				code, body := call(t, s, "POST", "/reload", bad)
				if code != http.StatusUnauthorized || !strings.Contains(body, "admin token") {
					t.Errorf("token %q: %d %q", bad, code, body)
				}
			}
			if code, _ := call(t, s, "GET", "/debug/pprof/cmdline", "wrong"); code != http.StatusUnauthorized {
				t.Errorf("pprof with a wrong token: %d", code)
			}
			if reloads != 0 {
				t.Fatalf("%d reloads ran without the token", reloads)
			}
			if code, body := call(t, s, "POST", "/reload", token); code != http.StatusOK || reloads != 1 {
				t.Errorf("right token: %d %q, %d reloads", code, body, reloads)
			}
			if code, body := call(t, s, "POST", "/capture?action=stop", token); code != http.StatusOK {
				t.Errorf("capture with the token: %d %q", code, body)
			}
			if code, _ := call(t, s, "GET", "/debug/pprof/cmdline", token); code != http.StatusOK {
				t.Errorf("pprof with the token: %d", code)
			}
			if code, _ := call(t, s, "GET", "/metrics", ""); code != http.StatusOK {
				t.Errorf("/metrics without the token: %d", code)
			}
		})
	}
}

// Without a token, a loopback-only listener serves every endpoint.
func TestLoopbackListenerWithoutToken(t *testing.T) {
	reloads := 0
	s := listenT(t, "127.0.0.1:0", options(&reloads))
	if !s.LoopbackOnly() {
		t.Fatal("127.0.0.1 not taken for loopback")
	}
	if code, body := call(t, s, "POST", "/reload", ""); code != http.StatusOK || reloads != 1 {
		t.Errorf("reload: %d %q", code, body)
	}
}
