package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// The keys of the configuration are found by walking Config, never listed
// by hand: a struct field is a section (its mapstructure tag is the key's
// segment), a map[string]T holds named entries (upstreams.<name>,
// auth.users.<name>), a list of sections (routes) is one key, and anything
// else is a value. A field added to Config has its environment variable and
// is known to the unknown-key check from the start.

// ErrUnknownKey is wrapped by the error for a key of the file (or of a
// variable's YAML value) that the configuration does not have.
var ErrUnknownKey = errors.New("unknown key")

// ErrUnknownVariable is wrapped by the error for an EMQPROXY_ variable
// that names no configuration key.
var ErrUnknownVariable = errors.New("names no configuration key")

// NodePasswordVariable is the password of the node-level commands (fence,
// verify); it is not a configuration key.
const NodePasswordVariable = EnvPrefix + "_NODE_PASSWORD"

// kind is how a key's environment variable is read.
type kind int

const (
	// kindValue is a string, a bool, a number or a duration: the
	// variable's value as it is.
	kindValue kind = iota
	// kindList is a list of strings: the variable is comma-separated,
	// each item trimmed of spaces.
	kindList
	// kindTable is a map of entries or a list of sections: the variable
	// holds a YAML (or JSON) value that replaces the file's.
	kindTable
)

// kindOf returns how a key of type t is read from its variable.
func kindOf(t reflect.Type) kind {
	switch {
	case t.Kind() == reflect.Map:
		return kindTable
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return kindTable
	case t.Kind() == reflect.Slice:
		return kindList
	}
	return kindValue
}

// field is one keyed field of a section.
type field struct {
	name  string // the key's segment
	index int
}

// fields returns the keyed fields of the section type t, in order: those
// whose mapstructure tag names them (not "-").
func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("mapstructure"), ",")
		if name != "" && name != "-" {
			out = append(out, field{name: name, index: i})
		}
	}
	return out
}

// join appends a segment to a dotted key.
func join(path, seg string) string {
	if path == "" {
		return seg
	}
	return path + "." + seg
}

// configType is the type the walk starts from.
var configType = reflect.TypeFor[Config]()

// walkKeys calls visit for every key under t at path, in field order. A
// map is a key of its own (kindTable) and then, for each entry name that
// names(path) returns, the keys of that entry.
func walkKeys(t reflect.Type, path string, names func(path string) []string, visit func(path string, t reflect.Type)) {
	switch {
	case t.Kind() == reflect.Struct:
		for _, f := range fields(t) {
			walkKeys(t.Field(f.index).Type, join(path, f.name), names, visit)
		}
	case t.Kind() == reflect.Map:
		visit(path, t)
		for _, name := range names(path) {
			walkKeys(t.Elem(), join(path, name), names, visit)
		}
	default:
		visit(path, t)
	}
}

// staticKeys are the keys outside map entries, with their types: the keys
// a command-line flag may name.
var staticKeys = func() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	walkKeys(configType, "", func(string) []string { return nil }, func(path string, t reflect.Type) { out[path] = t })
	return out
}()

// envReplacer maps a key to its variable's spelling.
var envReplacer = strings.NewReplacer(".", "_", "-", "_")

// EnvName returns the environment variable of a key: EMQPROXY_ and the key
// in upper case with "." and "-" replaced by "_"
// (upstreams.module-a.address is EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS).
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(envReplacer.Replace(key))
}

// otherVariable reports whether an EMQPROXY_ variable is one that is not a
// configuration key and is allowed anyway: the node commands' password,
// and the variables Kubernetes sets in every pod of a namespace with a
// Service named emqproxy (EMQPROXY_SERVICE_HOST, EMQPROXY_PORT,
// EMQPROXY_PORT_6380_TCP_ADDR, ...). No key is named service or port, so
// these never hide a key (TestOtherVariablesHideNoKey).
func otherVariable(name string) bool {
	return name == NodePasswordVariable || name == EnvPrefix+"_PORT" ||
		strings.HasPrefix(name, EnvPrefix+"_PORT_") || strings.HasPrefix(name, EnvPrefix+"_SERVICE_")
}

// unknown is a key the configuration does not have, with the known key
// nearest to it ("" when none is near).
type unknown struct{ key, near string }

// errorIn returns the error for the unknown key found in source (a file or
// a variable).
func (u unknown) errorIn(source string) error {
	hint := ""
	if u.near != "" {
		hint = " (did you mean " + u.near + "?)"
	}
	return fmt.Errorf("%w: %s: %w in %s%s", ErrInvalid, u.key, ErrUnknownKey, source, hint)
}

// unknownKeys returns every key of raw (a decoded YAML value at path) that
// type t has no field for.
func unknownKeys(t reflect.Type, raw any, path string) []unknown {
	var out []unknown
	switch {
	case t.Kind() == reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return nil // not a section: the decoder names the key and the type
		}
		known := map[string]field{}
		for _, f := range fields(t) {
			known[f.name] = f
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			f, ok := known[strings.ToLower(k)]
			if !ok {
				u := unknown{key: join(path, k)}
				if near := nearest(strings.ToLower(k), slices.Collect(maps.Keys(known))); near != "" {
					u.near = join(path, near)
				}
				out = append(out, u)
				continue
			}
			out = append(out, unknownKeys(t.Field(f.index).Type, m[k], join(path, f.name))...)
		}
	case t.Kind() == reflect.Map:
		if m, ok := raw.(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				out = append(out, unknownKeys(t.Elem(), m[k], join(path, k))...)
			}
		}
	case t.Kind() == reflect.Slice:
		if l, ok := raw.([]any); ok {
			for i, el := range l {
				out = append(out, unknownKeys(t.Elem(), el, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return out
}

// nearest returns the candidate within two edits of s (the closest, the
// first in sorted order on a tie), or "".
func nearest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range slices.Sorted(slices.Values(candidates)) {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// splitList is a list key's variable: comma-separated items, each trimmed
// of spaces, empty items dropped.
func splitList(s string) []string {
	out := []string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
