// Package admin serves emqproxy's admin HTTP endpoints: /healthz (the
// process is alive), /readyz (every upstream reachable and fenced, the map
// loaded), /metrics (Prometheus), POST /reload (re-read the map and routes,
// like SIGHUP), GET /capture (the capture's status) and POST /capture
// (action=start or action=stop, optionally queues=a,b to capture other
// queues than the configured ones) and, when enabled, /debug/pprof/.
//
// It owns no state of its own: readiness, reload and capture are functions
// the caller passes in, and the metrics are whatever the registry holds.
package admin
