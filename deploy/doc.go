// Package deploy holds what operators install, not code: example
// configurations (examples/), Kubernetes manifests for the sidecar
// (kubernetes/), a hardened systemd unit (systemd/), the container build
// (Dockerfile) and a Grafana dashboard (grafana/).
//
// Its tests (deploy_test.go) parse every artifact and check the wiring
// between them and the code: ports against the configuration, probe paths
// against the admin endpoints, mounted file names against the configured
// paths, dashboard queries against the metrics the proxy registers. The
// package must not hold code the proxy runs.
package deploy
