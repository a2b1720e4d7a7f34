package fence

import "errors"

// Sentinel errors; every error the checks return wraps one of them (or a
// transport error from the Conn) with a message saying what was found.
var (
	// ErrNotModule: EMQ.VERSION is unknown or its reply is not the module's.
	ErrNotModule = errors.New("fence: not a module node")
	// ErrWire: EMQ.VERSION reports another wire than echomq:6.0.0.
	ErrWire = errors.New("fence: wrong wire")
	// ErrModuleMajor: the module's version is not major 0.
	ErrModuleMajor = errors.New("fence: wrong module major")
	// ErrTokens: the module does not advertise exactly the fourteen tokens,
	// or lacks a token the pinned map uses.
	ErrTokens = errors.New("fence: wrong tokens")
	// ErrBrandAbsent: {emq}:version is absent and install is off.
	ErrBrandAbsent = errors.New("fence: brand absent")
	// ErrForeignBrand: {emq}:version holds another value than the one wanted.
	ErrForeignBrand = errors.New("fence: foreign brand")
	// ErrBrandType: {emq}:version is not a string (the GET failed).
	ErrBrandType = errors.New("fence: brand is not a string")
	// ErrInstall: branding the key failed (EMQ.INSTALL or SET NX).
	ErrInstall = errors.New("fence: install failed")
)
