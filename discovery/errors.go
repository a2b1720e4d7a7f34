package discovery

import "errors"

// Sentinel errors of the package; every returned error wraps one of them.
var (
	// ErrOptions means the Options are unusable (no master name, no
	// sentinel address, a bad address).
	ErrOptions = errors.New("discovery: invalid options")
	// ErrNoPrimary means no primary was confirmed before the caller's
	// deadline; the error carries the reasons of the last attempt.
	ErrNoPrimary = errors.New("discovery: no primary")
	// ErrNotPrimary means a candidate the sentinels named answered ROLE
	// with another role than master.
	ErrNotPrimary = errors.New("discovery: candidate is not a primary")
	// ErrUnknownMaster means a sentinel does not monitor the master set.
	ErrUnknownMaster = errors.New("discovery: sentinel does not know the master")
	// ErrClosed means the Resolver was closed.
	ErrClosed = errors.New("discovery: closed")
)
