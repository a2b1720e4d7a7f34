// Package pin computes and checks the pinned script map from the script
// bodies an operator has: a folder of .lua files, or the Elixir source files
// of a legacy release that hold each body as a module attribute.
//
// For Elixir sources the SHA-1 is that of the string the attribute evaluates
// to, so the package evaluates string literals by Elixir's own rules: heredoc
// indentation stripped by the closing delimiter's column, the escapes of
// string literals, line continuations, and the raw ~S sigil. A literal whose
// value is not fixed at compile time (interpolation, a value that continues
// past the literal) is refused rather than guessed.
//
// The package owns the spec file format (which attribute or file is which
// script, its token and its shape) and the canonical text of a map. It must
// not talk to a server, and it never writes a map that shamap would not load.
package pin
