package admin

import (
	"errors"
	"fmt"
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
		Loopback: true,
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
	if code, body := get(t, h, "GET", "/readyz"); code != 503 || body != "not ready\nproxy: not ready: upstream module-a: fence failed\n" {
		t.Errorf("/readyz while not ready, no upstream lines = %d %q", code, body)
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

func TestCaptureEndpoint(t *testing.T) {
	var got []CaptureRequest
	h := Handler(Options{Loopback: true, Capture: func(r CaptureRequest) ([]byte, error) {
		got = append(got, r)
		if r.Action == "stop" {
			return nil, errors.New("no capture is running")
		}
		return []byte(`{"running":true}`), nil
	}})
	if code, body := get(t, h, "POST", "/capture?action=start&queues=orders,+mail*"); code != 200 || body != "{\"running\":true}\n" {
		t.Errorf("start = %d %q", code, body)
	}
	if code, body := get(t, h, "POST", "/capture?action=stop"); code != 422 || !strings.Contains(body, "no capture is running") {
		t.Errorf("stop = %d %q", code, body)
	}
	if code, _ := get(t, h, "POST", "/capture?action=pause"); code != 400 {
		t.Errorf("bad action = %d", code)
	}
	if code, _ := get(t, h, "GET", "/capture"); code != 200 {
		t.Errorf("status = %d", code)
	}
	if len(got) != 3 || strings.Join(got[0].Queues, ",") != "orders,mail*" || got[2].Action != "status" {
		t.Errorf("requests %+v", got)
	}
	if code, _ := get(t, Handler(Options{}), "POST", "/capture?action=start"); code != 404 && code != 405 {
		t.Errorf("capture without a handler = %d", code)
	}
}

// TestReadyzOneLinePerUpstream: /readyz is the verdict and a line per
// upstream, and an error of several lines (errors.Join) stays on its
// upstream's line.
func TestReadyzOneLinePerUpstream(t *testing.T) {
	var ready error
	ups := []UpstreamState{{Name: "module-a"}, {Name: "scripts-b"}}
	h := Handler(Options{
		Ready:     func() error { return ready },
		Upstreams: func() []UpstreamState { return ups },
	})
	if code, body := get(t, h, "GET", "/readyz"); code != 200 || body != "ready\nupstream module-a: ready\nupstream scripts-b: ready\n" {
		t.Errorf("/readyz while ready = %d %q", code, body)
	}
	lost := errors.Join(errors.New("pipe: upstream connection lost"), errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: EOF"))
	ups[1].Err = fmt.Errorf("upstream: no primary: %w", lost)
	ready = fmt.Errorf("upstream scripts-b: %w", ups[1].Err)
	want := "not ready\nupstream module-a: ready\n" +
		"upstream scripts-b: not ready: upstream: no primary: pipe: upstream connection lost: read tcp 127.0.0.1:1->127.0.0.1:2: EOF\n"
	if code, body := get(t, h, "GET", "/readyz"); code != 503 || body != want {
		t.Errorf("/readyz with a joined error = %d %q, want %q", code, body, want)
	}
	ups[1].Err = nil
	ready = errors.New("proxy: server closed")
	want = "not ready\nupstream module-a: ready\nupstream scripts-b: ready\nproxy: not ready: proxy: server closed\n"
	if code, body := get(t, h, "GET", "/readyz"); code != 503 || body != want {
		t.Errorf("/readyz while shutting down = %d %q, want %q", code, body, want)
	}
}
