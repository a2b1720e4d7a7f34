// Package node starts and stops real redis-server processes for tests, the
// differential harness and local runs: a scripts node (wire 4, branded with
// the legacy brand), a module node (the stand's module loaded, branded by
// EMQ.INSTALL) or a bare node (no module, no brand).
//
// It owns the process lifecycle (free loopback port, temp dir, start, wait
// for PING, brand, stop by pid), the module build (BuildModule) and two
// small probes used by tests (RawDo, CommandStats).
//
// It must not be used by the proxy itself, must never connect to a server it
// did not start, and never uses fixed ports or sleeps as synchronisation:
// readiness and exit are observed by polling with a deadline.
package node
