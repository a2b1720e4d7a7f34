package upstream

import (
	"errors"

	"github.com/emqproxy/emqproxy/proxy/pipe"
)

// Sentinel errors of the package (package proxy exports them as its
// own); returned errors wrap one of them.
var (
	// ErrOptions means the Options are unusable (for example no upstream address).
	ErrOptions = errors.New("upstream: invalid options")
	// ErrUnavailable means an upstream has no usable connection.
	ErrUnavailable = errors.New("upstream: unavailable")
	// ErrLost means an upstream connection broke while commands waited on it.
	ErrLost = pipe.ErrLost
	// ErrTimeout means an upstream sent no reply within its timeout.
	ErrTimeout = pipe.ErrTimeout
	// ErrUpstreamProtocol means an upstream sent bytes that are not RESP,
	// or a reply nothing waited for.
	ErrUpstreamProtocol = pipe.ErrProtocol
	// ErrBoot means AUTH or SELECT failed on a new upstream connection.
	ErrBoot = errors.New("upstream: boot failed")
	// ErrNoPrimary means a Sentinel upstream's primary could not be found
	// (the sentinels named none that answers ROLE master in time).
	ErrNoPrimary = errors.New("upstream: no primary")
	// ErrNotPrimary means a new connection's node answered ROLE with
	// another role than master: it is refused before the fence.
	ErrNotPrimary = errors.New("upstream: node is not a primary")
	// ErrFence means the OnConnect hook refused a new upstream connection.
	ErrFence = errors.New("upstream: fence failed")
)
