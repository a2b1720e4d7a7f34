// Package bench holds emqproxy's benchmarks.
//
// The side-by-side run is `make bench` (bench/run.sh, the runner in
// bench/cmd/benchrun, the job mix generator in bench/jobmix): it measures
// passthrough against the server directly and against twemproxy, the legacy
// job mix against Lua and against EMQ.* directly, idle memory per client,
// the audit log's cost and CPU profiles, and writes bench/results/.
//
// This package itself holds the in-process Go benchmarks (run only with
// -bench): SET/GET pipelines through proxy.New in the test process versus
// directly to the same server, for profiling the data path with
// `go test -bench . -cpuprofile`.
//
// It must not be imported by the proxy and sends traffic only to loopback
// servers it starts itself.
package bench
