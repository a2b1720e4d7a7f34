// Package scripts holds the stand's wire-4 Lua scripts, one file per script
// (enqueue.lua, claim2.lua, ... and the declared reads stats.lua and
// peek.lua), and embeds their bytes.
//
// The files are the reference the native module is held to and the source
// of the pinned map (stand/map.yaml): each pin is the SHA-1 of a file's
// exact bytes, so a body must never be reformatted, given a shebang line or
// rewritten on load. Run `go generate ./stand/scripts` after changing one;
// a test fails while the map and the bodies disagree.
//
// The package only serves bytes; it must not talk to a server.
package scripts

//go:generate go run ./cmd/pinmap -out ../map.yaml
