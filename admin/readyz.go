package admin

import (
	"net/http"
	"strings"
)

// UpstreamState is one upstream's line of /readyz.
type UpstreamState struct {
	// Name is the upstream's name in the configuration.
	Name string
	// Err is nil while the upstream is served (reachable and fenced),
	// else the reason it is not.
	Err error
}

// readyz answers /readyz: 200 or 503, and a body of lines a monitoring
// check reads without parsing around anything:
//
//	ready | not ready
//	upstream <name>: ready
//	upstream <name>: not ready: <reason>
//	proxy: not ready: <reason>
//
// The first line is the verdict; then one line per upstream, in the
// configuration's order; the last only when the proxy is not ready for a
// reason that is no upstream's (it is shutting down). A reason never
// spans lines: the line breaks of a joined error become ": ".
func readyz(o Options) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var err error
		if o.Ready != nil {
			err = o.Ready()
		}
		var ups []UpstreamState
		if o.Upstreams != nil {
			ups = o.Upstreams()
		}
		var b strings.Builder
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			b.WriteString("not ready\n")
		} else {
			b.WriteString("ready\n")
		}
		upstreamDown := false
		for _, u := range ups {
			b.WriteString("upstream " + oneLine(u.Name) + ": ")
			if u.Err == nil {
				b.WriteString("ready\n")
				continue
			}
			upstreamDown = true
			b.WriteString("not ready: " + oneLine(u.Err.Error()) + "\n")
		}
		if err != nil && !upstreamDown {
			b.WriteString("proxy: not ready: " + oneLine(err.Error()) + "\n")
		}
		_, _ = w.Write([]byte(b.String()))
	}
}

// oneLine joins the lines of s with ": " (errors.Join puts each error on a
// line of its own).
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	parts := strings.Split(s, "\n")
	kept := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ": ")
}
