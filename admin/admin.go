package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configures the admin endpoints.
type Options struct {
	// Registry holds the metrics /metrics exposes.
	Registry *prometheus.Registry
	// Ready returns nil when the proxy is ready to serve, or the reason it
	// is not. /readyz answers 200 or 503 (readyz.go says the body).
	Ready func() error
	// Upstreams, when set, returns every upstream's state, in the
	// configuration's order: a line of /readyz each.
	Upstreams func() []UpstreamState
	// Reload re-reads the map and routes; nil disables POST /reload.
	Reload func() error
	// Capture starts (start true, with queues replacing the configured
	// ones when given) or stops a capture, and returns its status as JSON;
	// nil disables /capture. Status (start false, status true) only reads.
	Capture func(req CaptureRequest) ([]byte, error)
	// Pprof mounts net/http/pprof under /debug/pprof/.
	Pprof bool
	// Token, when set, is the credential the state-changing endpoints
	// (POST /reload, POST /capture, /debug/pprof/) require on every
	// listener, loopback included: "Authorization: Bearer <Token>".
	Token string
	// Loopback says the listener accepts loopback connections only;
	// Listen sets it from the address it bound. Without a Token the
	// state-changing endpoints are served on such a listener only.
	Loopback bool
}

// CaptureRequest is one call of /capture.
type CaptureRequest struct {
	Action string   // "start", "stop" or "status"
	Queues []string // start: queue globs replacing the configured ones
}

// Handler returns the admin endpoints as one handler.
func Handler(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", readyz(o))
	if o.Registry != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
	}
	if o.Reload != nil {
		mux.HandleFunc("POST /reload", o.guard(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if err := o.Reload(); err != nil {
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = w.Write([]byte("reload refused: " + err.Error() + "\n"))
				return
			}
			_, _ = w.Write([]byte("reloaded\n"))
		}))
	}
	if o.Capture != nil {
		capture := func(w http.ResponseWriter, req CaptureRequest) {
			body, err := o.Capture(req)
			if err != nil {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = w.Write([]byte("capture " + req.Action + " refused: " + err.Error() + "\n"))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(append(body, '\n'))
		}
		mux.HandleFunc("GET /capture", func(w http.ResponseWriter, _ *http.Request) {
			capture(w, CaptureRequest{Action: "status"})
		})
		mux.HandleFunc("POST /capture", o.guard(func(w http.ResponseWriter, r *http.Request) {
			req := CaptureRequest{Action: r.FormValue("action")}
			if req.Action != "start" && req.Action != "stop" {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte("action must be start or stop\n"))
				return
			}
			for _, q := range strings.Split(r.FormValue("queues"), ",") {
				if q = strings.TrimSpace(q); q != "" {
					req.Queues = append(req.Queues, q)
				}
			}
			capture(w, req)
		}))
	}
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/", o.guard(pprof.Index))
		mux.HandleFunc("/debug/pprof/cmdline", o.guard(pprof.Cmdline))
		mux.HandleFunc("/debug/pprof/profile", o.guard(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", o.guard(pprof.Symbol))
		mux.HandleFunc("/debug/pprof/trace", o.guard(pprof.Trace))
	}
	return mux
}

// guard serves h to the requests the credential rule lets through: with a
// Token, those that carry it (compared in constant time, through SHA-256
// so the length is not given away either), others get 401; without one,
// every request on a loopback-only listener, and none (403, saying how to
// open it) on any other.
func (o Options) guard(h http.HandlerFunc) http.HandlerFunc {
	switch {
	case o.Token != "":
		want := sha256.Sum256([]byte(o.Token))
		return func(w http.ResponseWriter, r *http.Request) {
			got, ok := bearer(r)
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="emqproxy admin"`)
				plain(w, http.StatusUnauthorized, "unauthorized: "+r.Method+" "+r.URL.Path+
					" needs the admin token (Authorization: Bearer <admin.token>)\n")
				return
			}
			h(w, r)
		}
	case o.Loopback:
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		plain(w, http.StatusForbidden, "forbidden: "+r.Method+" "+r.URL.Path+
			" is not served on an admin listener that is not loopback-only without a token:"+
			" set admin.token (or admin.token_file, or EMQPROXY_ADMIN_TOKEN), or bind admin.listen to loopback\n")
	}
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// plain answers a text/plain body with code.
func plain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// Server is a running admin listener.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// LoopbackOnly reports whether the listener accepts loopback connections
// only (127.0.0.0/8, ::1), so that without a token the state-changing
// endpoints are served.
func (s *Server) LoopbackOnly() bool { return isLoopback(s.ln.Addr()) }

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// Listen starts serving the admin endpoints on addr; o.Loopback is set
// from the address bound (a host name is resolved by the bind).
func Listen(addr string, o Options) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	o.Loopback = isLoopback(ln.Addr())
	s := &Server{
		srv: &http.Server{Handler: Handler(o), ReadHeaderTimeout: 5 * time.Second},
		ln:  ln,
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return s, nil
}

// Addr is the address the admin listener is bound to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the listener, waiting for open requests up to ctx.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
