package node

import "errors"

// Sentinel errors of the package; every returned error wraps one of them.
var (
	// ErrNoServer means a server binary was not found or does not run:
	// redis-server neither in PATH nor in /usr/bin, or no usable Valkey.
	ErrNoServer = errors.New("node: server not available")
	// ErrNoModuleSource means stand/module/emq.c does not exist yet.
	ErrNoModuleSource = errors.New("node: module source missing")
	// ErrBuild means the module build failed.
	ErrBuild = errors.New("node: module build failed")
	// ErrStart means the server did not start or did not answer in time.
	ErrStart = errors.New("node: server start failed")
	// ErrSetup means the ACL or brand step after start failed.
	ErrSetup = errors.New("node: server setup failed")
	// ErrStopped means the node is not running.
	ErrStopped = errors.New("node: not running")
	// ErrProtocol means a reply could not be framed.
	ErrProtocol = errors.New("node: malformed reply")
)
