// Package node starts and stops real redis-server processes for tests, the
// differential harness and local runs: a scripts node (wire 4, branded with
// the legacy brand), a module node (the stand's module loaded, branded by
// EMQ.INSTALL) or a bare node (no module, no brand); a replica of any of
// them (Options.ReplicaOf: never branded, the brand replicates) and a
// sentinel (Options.Sentinel: the same binary with --sentinel). StartHA
// starts a primary, its replica and three sentinels and waits until they
// monitor each other; KillPrimary and WaitPromoted drive a failover.
//
// It owns the process lifecycle (free loopback port, temp dir, start, wait
// for PING, brand, stop by pid), the module build (BuildModule) and two
// small probes used by tests (RawDo, CommandStats).
//
// It must not be used by the proxy itself, must never connect to a server it
// did not start, and never uses fixed ports or sleeps as synchronisation:
// readiness and exit are observed by polling with a deadline.
package node
