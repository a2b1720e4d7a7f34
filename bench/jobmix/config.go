package jobmix

import (
	"fmt"
	"time"
)

// Mode selects how the mix is sent.
type Mode string

// The modes.
const (
	// Legacy drives the stand's wire-4 client (EVALSHA, pause reads).
	Legacy Mode = "legacy"
	// Native sends EMQ.* commands with valkey-go to a module node.
	Native Mode = "native"
	// Get sends plain GETs with valkey-go configured as the legacy client
	// configures it, three round trips per cycle in place of enqueue, claim
	// and complete: what any hop adds to the same client's round trip
	// (twemproxy carries it; it carries neither mode above).
	Get Mode = "get"
)

// Config describes one run.
type Config struct {
	Mode     Mode
	Addr     string        // host:port: a scripts node, the proxy or a module node
	Clients  int           // concurrent clients, one connection and one queue each
	Pipeline int           // calls per round trip (1 = every call waited for)
	Warmup   time.Duration // run but not counted
	Duration time.Duration // the measured window
	Payload  int           // payload bytes per job
	// PauseRead makes a native worker read the queue's pause flag (EXISTS
	// emq:{q}:paused) before each claim, as the legacy client does: the
	// same round trips per cycle on both sides, for latency comparisons.
	PauseRead bool
	Tag       string // makes queue names and ids unique per run
	// MaxCycles bounds the cycles per client (0 = DefaultMaxCycles), so a
	// run stops by count even if the clock misbehaves.
	MaxCycles int64
	// MaxSamples bounds the latency samples kept per client (0 = DefaultMaxSamples).
	MaxSamples int
	// KeepGoing makes a client count an error and start its next cycle
	// (after ErrorPause) instead of stopping the run: the floods of
	// benchrun, where the well-behaved clients' errors are a measurement.
	// The run also ends at the window's end without waiting for calls in
	// flight (Result.Stalled counts them).
	KeepGoing bool
}

// ErrorPause is how long a KeepGoing client waits after an error before
// its next cycle, so a client that gets only errors does not spin.
const ErrorPause = 10 * time.Millisecond

// StallAfter is how long a KeepGoing client's call must have been waiting
// at the window's end to count as stalled (Result.Stalled): far above a
// round trip on loopback, so only a call held up is counted.
const StallAfter = 100 * time.Millisecond

// Defaults.
const (
	DefaultMaxCycles  = 10_000_000
	DefaultMaxSamples = 200_000
	// MaxDuration bounds Warmup+Duration.
	MaxDuration = 5 * time.Minute
)

func (c Config) validate() (Config, error) {
	if c.Mode != Legacy && c.Mode != Native && c.Mode != Get {
		return c, fmt.Errorf("%w: mode %q (legacy, native or get)", ErrConfig, c.Mode)
	}
	if c.Addr == "" {
		return c, fmt.Errorf("%w: no address", ErrConfig)
	}
	if c.Clients < 1 || c.Clients > 10000 {
		return c, fmt.Errorf("%w: clients %d (1..10000)", ErrConfig, c.Clients)
	}
	if c.Pipeline < 1 || c.Pipeline > 1024 {
		return c, fmt.Errorf("%w: pipeline %d (1..1024)", ErrConfig, c.Pipeline)
	}
	if c.Duration <= 0 || c.Warmup < 0 || c.Warmup+c.Duration > MaxDuration {
		return c, fmt.Errorf("%w: warmup %v + duration %v (at most %v, duration > 0)", ErrConfig, c.Warmup, c.Duration, MaxDuration)
	}
	if c.Payload < 0 || c.Payload > 1<<20 {
		return c, fmt.Errorf("%w: payload %d (0..1 MiB)", ErrConfig, c.Payload)
	}
	if c.MaxCycles <= 0 {
		c.MaxCycles = DefaultMaxCycles
	}
	if c.MaxSamples <= 0 {
		c.MaxSamples = DefaultMaxSamples
	}
	return c, nil
}
