// Package admin serves emqproxy's admin HTTP endpoints: /healthz (the
// process is alive), /readyz (every upstream reachable and fenced, the map
// loaded), /metrics (Prometheus), POST /reload (re-read the map and routes,
// like SIGHUP), GET /capture (the capture's status) and POST /capture
// (action=start or action=stop, optionally queues=a,b to capture other
// queues than the configured ones) and, when enabled, /debug/pprof/.
//
// The state-changing endpoints (POST /reload, POST /capture and pprof,
// which can run the CPU for a profile's length and shows the command line)
// are guarded; the probes, the metrics and the capture's status never are,
// so kubelet probes and Prometheus need no credential:
//
//   - with a token configured (admin.token, admin.token_file or
//     EMQPROXY_ADMIN_TOKEN), every guarded request must carry
//     "Authorization: Bearer <token>", on every listener, loopback
//     included (a token an operator configured is never ignored); a
//     missing or wrong one is 401. The comparison is in constant time.
//   - without a token, a listener bound to loopback only (127.0.0.0/8,
//     ::1) serves them: only processes of the host reach it.
//   - without a token, any other listener (0.0.0.0, a pod IP) refuses them
//     with 403 and a body that says how to open them: a proxy is never run
//     with its reload and capture open to the network by mistake.
//
// It owns no state of its own: readiness, reload and capture are functions
// the caller passes in, and the metrics are whatever the registry holds.
package admin
