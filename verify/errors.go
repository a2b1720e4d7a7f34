package verify

import "errors"

// Sentinel errors of the package; every error Run returns wraps one of them.
var (
	// ErrConfig means the configuration is incomplete (no address, no map,
	// no bodies folder, or a map that lacks a script the harness needs).
	ErrConfig = errors.New("verify: bad configuration")
	// ErrPin means a script body does not hash to its pin; the harness
	// refuses to measure.
	ErrPin = errors.New("verify: body does not match its pin")
	// ErrNotScratch means the server is not a module node branded
	// echomq:6.0.0.
	ErrNotScratch = errors.New("verify: not a scratch module node")
	// ErrNotEmpty means the keyspace holds keys other than the brand and
	// Config.Force is not set.
	ErrNotEmpty = errors.New("verify: keyspace is not empty")
	// ErrServer means the server could not be reached or answered a harness
	// step (not a case) unexpectedly.
	ErrServer = errors.New("verify: server error")
)
