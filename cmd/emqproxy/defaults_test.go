package main

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
)

// TestDefaultsAreTheLibrarys: every default of the configuration that the
// library has a default for too is the library's, so a proxy built from
// proxy.Options alone (the tests, bench/, an embedder) behaves as the
// daemon does with an empty file. Package proxy's defaults are config's
// constants (config/defaults.go); the packages below it that may be used
// alone keep their own (the framer's limits in proxy/resp, the upstreams'
// timeouts in proxy/upstream, the socket mode in netaddr, the disk budget
// in capture), and this test keeps those equal to config's. A key the
// configuration adds must be placed in one of the two tables below.
func TestDefaultsAreTheLibrarys(t *testing.T) {
	library := map[string]any{
		"listen":                  proxy.DefaultListen,
		"listen_mode":             netaddr.DefaultMode,
		"limits.max_clients":      proxy.DefaultMaxClients,
		"limits.max_multibulk":    resp.DefaultMaxMultibulk,
		"limits.max_bulk":         resp.DefaultMaxBulk,
		"limits.max_inline":       resp.DefaultMaxInline,
		"limits.max_pipeline":     proxy.DefaultMaxPipeline,
		"limits.max_reply_bytes":  proxy.DefaultMaxReplyBytes,
		"limits.max_queued_multi": proxy.DefaultMaxQueuedMulti,
		"limits.buffered_bytes":   proxy.DefaultMaxBuffered,
		"limits.share_commands":   proxy.DefaultShareCommands,
		"limits.share_bytes":      proxy.DefaultShareBytes,
		"limits.isolate_for":      proxy.DefaultIsolateFor,
		"timeouts.dial":           upstream.DefaultDialTimeout,
		"timeouts.upstream":       upstream.DefaultUpstreamTimeout,
		"timeouts.write":          proxy.DefaultWriteTimeout,
		"timeouts.probe":          upstream.DefaultProbeInterval,
		"timeouts.idle":           time.Duration(0), // Options.IdleTimeout 0: never
		"timeouts.hold":           proxy.DefaultHold,
		"control.enabled":         false, // Options.Control nil: off
		"control.poll":            proxy.DefaultControlPoll,
		"control.lease":           proxy.DefaultControlLease,
		"auth.fail_delay":         proxy.DefaultAuthFailDelay,
		"auth.max_failures":       proxy.DefaultMaxAuthFailures,
		"auth.max_fail_delay":     proxy.DefaultMaxAuthFailDelay,
		"auth.timeout":            proxy.DefaultAuthTimeout,
		"audit.passthrough":       false, // Options.AuditPassthrough
		"capture.queues":          []string{},
		"capture.max_bytes":       capture.DefaultMaxBytes,
	}
	// The keys the library has no default for: they are the daemon's own,
	// or the library takes them as given (a zero there is not a default).
	daemon := []string{
		"tls.min_version",        // the listener's TLS is built in cmd/emqproxy
		"map",                    // the map file is read in cmd/emqproxy
		"policy.unknown_scripts", // mapped to rewrite.Policy.Unknown in policyFor
		"policy.allow",           // mapped to rewrite.Policy.Allow in policyFor
		"timeouts.drain",         // the SIGTERM drain is serve's
		"audit.sink",             // the audit logger is built in cmd/emqproxy
		"capture.dir",            // required by a capture; no default
		"capture.redact",         // a boolean the daemon turns on; the library's zero is off
		"log.level", "log.format",
		"admin.listen", "admin.pprof", "admin.token", "admin.token_file",
		"runtime.gomaxprocs",
		"runtime.soft_memory_limit", // a process-wide knob the daemon turns on; the library's zero is off (one Server per process may set it)
	}
	for key, got := range config.Defaults() {
		want, ok := library[key]
		if !ok {
			if !slices.Contains(daemon, key) {
				t.Errorf("%s: a default of the configuration this test does not know: compare it with the library's, or list it as the daemon's", key)
			}
			continue
		}
		if !sameDefault(t, key, got, want) {
			t.Errorf("%s: the configuration's default is %v, the library's %v", key, got, want)
		}
	}
	for key := range library {
		if _, ok := config.Defaults()[key]; !ok {
			t.Errorf("%s: compared here, but not a key of the configuration's defaults", key)
		}
	}
}

// sameDefault compares a configuration default (as config.Defaults holds
// it: durations as strings, modes as octal strings, sizes as int or
// int64) with the library's.
func sameDefault(t *testing.T, key string, got, want any) bool {
	t.Helper()
	if d, ok := want.(time.Duration); ok {
		s, ok := got.(string)
		if !ok {
			t.Errorf("%s: %T, want a duration string", key, got)
			return true
		}
		g, err := time.ParseDuration(s)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return true
		}
		return g == d
	}
	if m, ok := want.(fs.FileMode); ok {
		s, ok := got.(string)
		if !ok {
			t.Errorf("%s: %T, want a mode written as an octal string", key, got)
			return true
		}
		g, err := strconv.ParseUint(s, 8, 32)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return true
		}
		return fs.FileMode(g) == m
	}
	return fmt.Sprint(got) == fmt.Sprint(want)
}
