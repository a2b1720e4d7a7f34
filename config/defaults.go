package config

import "time"

// The defaults of the keys the proxy library (package proxy's Options,
// ControlOptions, the upstreams' options) has a default for too. They are
// defined here once: Defaults gives them to the file's keys, and package
// proxy applies them to the zero fields of the Options it is given, so a
// proxy built from proxy.Options alone (the tests, bench/, an embedder)
// behaves as the daemon does with an empty file. The packages below the
// proxy that a caller may also use alone (resp's framer limits,
// proxy/upstream's timeouts, capture's disk budget, netaddr's socket mode)
// keep their own defaults for that use; cmd/emqproxy's defaults test keeps
// them equal to these.
const (
	DefaultListen         = "127.0.0.1:6380"
	DefaultMaxClients     = 10000
	DefaultMaxMultibulk   = 1024 * 1024
	DefaultMaxBulk        = int64(512 << 20)
	DefaultMaxInline      = 64 << 10
	DefaultMaxPipeline    = 1024
	DefaultMaxReplyBytes  = int64(64 << 20)
	DefaultMaxQueuedMulti = 10000
	// DefaultMaxBuffered is the process-wide budget (limits.buffered_bytes):
	// a quarter of the shipped manifests' 512 Mi memory limit, so the
	// budget plus one command beyond it, with the runtime's garbage, stays
	// under it.
	DefaultMaxBuffered = int64(128 << 20)
	// DefaultShareCommands, DefaultShareBytes and DefaultIsolateFor bound
	// one client's share of a shared upstream connection.
	DefaultShareCommands = 64
	DefaultShareBytes    = int64(1 << 20)
	DefaultIsolateFor    = 30 * time.Second

	DefaultDialTimeout     = 2 * time.Second
	DefaultUpstreamTimeout = 5 * time.Second
	DefaultWriteTimeout    = 30 * time.Second
	DefaultProbeInterval   = time.Second
	DefaultHold            = 5 * time.Second
	DefaultControlPoll     = 250 * time.Millisecond
	DefaultControlLease    = 2 * time.Second

	DefaultAuthFailDelay    = 100 * time.Millisecond
	DefaultMaxAuthFailures  = 10
	DefaultMaxAuthFailDelay = 2 * time.Second
	DefaultAuthTimeout      = 10 * time.Second

	DefaultCaptureMaxBytes = int64(1 << 30)
)
