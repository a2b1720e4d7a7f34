package deploy_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/emqproxy/emqproxy/admin"
)

// The sidecar's admin listener is the pod IP, so its state-changing
// endpoints need the admin token: it comes from a Secret, the
// configuration reads it, and with it the admin handler refuses a reload
// without it while the probes and /metrics stay open.
func TestKubernetesAdminTokenFromSecret(t *testing.T) {
	m := loadManifests(t)
	sc, cfg, _ := m.sidecarConfig(t)
	host, _, err := net.SplitHostPort(cfg.Admin.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		t.Skipf("admin.listen %s is loopback-only: no token needed", cfg.Admin.Listen)
	}
	const name = "EMQPROXY_ADMIN_TOKEN"
	var fromSecret bool
	for _, e := range sc.Env {
		if e.Name == name {
			fromSecret = e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "" && e.ValueFrom.SecretKeyRef.Key != ""
		}
	}
	if !fromSecret {
		t.Fatalf("admin.listen %s is not loopback-only and %s is not taken from a Secret: /reload and /capture would be refused", cfg.Admin.Listen, name)
	}
	const token = "token-from-the-secret-0123"
	t.Setenv(name, token)
	_, cfg, _ = m.sidecarConfig(t)
	got, err := cfg.AdminToken()
	if err != nil || got != token {
		t.Fatalf("%s is not the admin token: %q %v", name, got, err)
	}
	srv := httptest.NewServer(admin.Handler(admin.Options{
		Registry: prometheus.NewRegistry(), Ready: func() error { return nil },
		Reload: func() error { return nil }, Token: got,
	}))
	defer srv.Close()
	do := func(method, path, bearer string) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := do("POST", "/reload", ""); code != http.StatusUnauthorized {
		t.Errorf("POST /reload without the token: %d", code)
	}
	if code := do("POST", "/reload", token); code != http.StatusOK {
		t.Errorf("POST /reload with the token: %d", code)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code := do("GET", path, ""); code != http.StatusOK {
			t.Errorf("GET %s without the token: %d", path, code)
		}
	}
}
