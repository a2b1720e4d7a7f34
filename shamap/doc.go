// Package shamap loads and validates the pinned script map: for one legacy
// EchoMQ release, each Lua script's name, SHA-1, kind (a job-core verb with
// its token, or a declared read) and shape (number of keys and values).
//
// The map is the proxy's only source of truth about which EVALSHA calls may
// be rewritten to EMQ.<TOKEN> and which may pass. A Map is immutable once
// loaded, so it can be shared by every session and swapped atomically on
// reload. The package does no network I/O.
package shamap
