package proxy

import (
	"errors"

	"github.com/emqproxy/emqproxy/proxy/session"
	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// Sentinel errors of the package; returned errors wrap one of them.
var (
	// ErrOptions means the Options are unusable (for example no upstream address).
	ErrOptions = upstream.ErrOptions
	// ErrServerClosed is returned by Serve after Shutdown.
	ErrServerClosed = session.ErrServerClosed
	// ErrUnavailable means an upstream has no usable connection.
	ErrUnavailable = upstream.ErrUnavailable
	// ErrLost means an upstream connection broke while commands waited on it.
	ErrLost = upstream.ErrLost
	// ErrTimeout means an upstream sent no reply within its timeout.
	ErrTimeout = upstream.ErrTimeout
	// ErrUpstreamProtocol means an upstream sent bytes that are not RESP,
	// or a reply nothing waited for.
	ErrUpstreamProtocol = upstream.ErrUpstreamProtocol
	// ErrBoot means AUTH or SELECT failed on a new upstream connection.
	ErrBoot = upstream.ErrBoot
	// ErrNoPrimary means a Sentinel upstream's primary could not be found
	// (the sentinels named none that answers ROLE master in time).
	ErrNoPrimary = upstream.ErrNoPrimary
	// ErrNotPrimary means a new connection's node answered ROLE with
	// another role than master: it is refused before the fence.
	ErrNotPrimary = upstream.ErrNotPrimary
	// ErrFence means the OnConnect hook refused a new upstream connection.
	ErrFence = upstream.ErrFence
	// ErrRoutes means a set of routes is unusable (an unknown upstream, a
	// bad pattern, no default route); SwapRoutes keeps the old ones.
	ErrRoutes = errors.New("proxy: invalid routes")
)
