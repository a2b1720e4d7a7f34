// Package config reads emqproxy's configuration: one YAML file, every key
// overridable by an EMQPROXY_-prefixed environment variable ("." and "-"
// become "_", so upstreams.module-a.address is
// EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS) and by command-line flags.
//
// The keys are found by walking Config's mapstructure tags (keys.go), so a
// field added to it has its variable and is known to the checks at once.
// The configuration fails closed: a key of the file the configuration does
// not have, and an EMQPROXY_ variable that names no key, are errors naming
// them (env.go says how each kind of key reads its variable). A reload
// applies only the keys Reloadable lists; CheckReload names every other
// key whose value changed (reload.go).
//
// It parses and validates into plain structs and names the key of every bad
// value. It does no wiring and opens no sockets: cmd/emqproxy turns a Config
// into running parts.
//
// Its defaults (defaults.go) and its rules for routes and for the replica
// acknowledgement of writes (CheckRoutes, CheckAck) are the only ones:
// package proxy applies them to the Options it is given (proxy.Options
// says how), so a proxy built without a file is held to the same. config
// imports nothing of the proxy.
package config
