package admin

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "emqproxy_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady error
	reloads := 0
	h := Handler(Options{
		Registry: reg,
		Ready:    func() error { return notReady },
		Reload:   func() error { reloads++; return nil },
	})

	if code, body := get(t, h, "GET", "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, _ := get(t, h, "GET", "/readyz"); code != 200 {
		t.Errorf("/readyz while ready = %d", code)
	}
	notReady = errors.New("upstream module-a: fence failed")
	if code, body := get(t, h, "GET", "/readyz"); code != 503 || !strings.Contains(body, "fence failed") {
		t.Errorf("/readyz while not ready = %d %q", code, body)
	}
	if code, body := get(t, h, "GET", "/metrics"); code != 200 || !strings.Contains(body, "emqproxy_test_total 3") {
		t.Errorf("/metrics = %d %q", code, body)
	}
	if code, _ := get(t, h, "POST", "/reload"); code != 200 || reloads != 1 {
		t.Errorf("/reload = %d, reloads %d", code, reloads)
	}
	if code, _ := get(t, h, "GET", "/debug/pprof/"); code != 404 {
		t.Errorf("pprof mounted without being asked: %d", code)
	}
}
