package pin

import "errors"

// Sentinel errors, wrapped with %w by every error the package returns.
var (
	// ErrSpec rejects a spec file: which scripts exist, their tokens and shapes.
	ErrSpec = errors.New("pin: invalid spec")
	// ErrSyntax rejects Elixir source the scanner cannot read to the end
	// (an unterminated literal, a bad escape, invalid UTF-8).
	ErrSyntax = errors.New("pin: elixir syntax")
	// ErrNotFixed rejects an attribute whose value is not a fixed string:
	// interpolation, a charlist, or an expression that goes on past the literal.
	ErrNotFixed = errors.New("pin: value is not a fixed string")
	// ErrBodies rejects a set of bodies: a missing file or attribute, one
	// defined twice, a .lua file the spec does not name.
	ErrBodies = errors.New("pin: bodies")
)
