// Package config reads emqproxy's configuration: one YAML file, every key
// overridable by an EMQPROXY_-prefixed environment variable (viper's key
// replacer maps "." and "-" to "_", so upstreams.module-a.address is
// EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS) and by command-line flags.
//
// It parses and validates into plain structs and names the key of every bad
// value. It does no wiring and opens no sockets: cmd/emqproxy turns a Config
// into running parts.
package config
