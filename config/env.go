package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Environment variables. Every key has one (EnvName): a value key its
// value as it is, a list key comma-separated items, and a table key (a map
// such as upstreams or auth.users, or the routes) a YAML or JSON value
// that replaces the file's. The entries of a map are those the file names,
// or those of its table variable when set; each entry's keys have their
// own variables (EMQPROXY_UPSTREAMS_MODULE_A_PASSWORD), which win over the
// table variable, as every variable wins over the file. An empty variable
// counts as unset. A variable that names no key is an error: a misspelt
// EMQPROXY_AUTH_PASWORD must not start a proxy without authentication.

// binder reads every key's variable of one load into the file's settings,
// replacing the file's value: the flags, bound above the file, still win.
type binder struct {
	raw  map[string]any    // the file's settings, variables applied
	env  map[string]string // the EMQPROXY_ variables and their values
	vars map[string]string // variable -> the key it sets
	errs []error
}

// environment returns the EMQPROXY_ variables of environ (KEY=value lines).
func environment(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		k, val, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, EnvPrefix+"_") {
			out[k] = val
		}
	}
	return out
}

// bad records a problem with a key or a variable.
func (b *binder) bad(key, format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("%w: %s: %s", ErrInvalid, key, fmt.Sprintf(format, args...)))
}

// names returns the entry names of the map at path, in the settings.
func (b *binder) names(path string) []string {
	m, _ := lookup(b.raw, path).(map[string]any)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, strings.ToLower(k))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// visit reads one key's variable, when it is set. The walk visits a map
// before its entries, so an entry's variable replaces what the table
// variable gave.
func (b *binder) visit(path string, t reflect.Type) {
	name := EnvName(path)
	if other, taken := b.vars[name]; taken {
		b.bad(path, "its variable %s is also that of %s; rename one", name, other)
		return
	}
	b.vars[name] = path
	val := b.env[name]
	if val == "" {
		return
	}
	if kindOf(t) != kindTable {
		store(b.raw, path, val) // decoded by the key's type (decodeHook)
		return
	}
	var parsed any
	if err := yaml.Unmarshal([]byte(val), &parsed); err != nil {
		b.bad(name, "not a YAML value for %s: %v", path, err)
		return
	}
	parsed = stringKeys(parsed)
	wantMap := t.Kind() == reflect.Map
	if _, isMap := parsed.(map[string]any); wantMap != isMap {
		b.bad(name, "%s takes a YAML %s", path, map[bool]string{true: "mapping", false: "sequence"}[wantMap])
		return
	}
	for _, k := range unknownKeys(t, parsed, path) {
		b.errs = append(b.errs, k.errorIn(name))
	}
	store(b.raw, path, parsed)
}

// unknownVariables reports every EMQPROXY_ variable that set no key.
func (b *binder) unknownVariables() {
	known := slices.Collect(maps.Keys(b.vars))
	for _, name := range slices.Sorted(maps.Keys(b.env)) {
		if _, ok := b.vars[name]; ok || otherVariable(name) {
			continue
		}
		msg := "%w"
		if near := nearest(name, known); near != "" {
			msg += " (did you mean " + near + "?)"
		}
		b.errs = append(b.errs, fmt.Errorf("%w: %s: "+msg, ErrInvalid, name, ErrUnknownVariable))
	}
}

// decodeHook turns a string (an environment variable) into a duration or
// a list of strings (comma-separated) where the key takes one.
func decodeHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || from.Kind() != reflect.String {
		return data, nil
	}
	switch {
	case to == reflect.TypeFor[time.Duration]():
		return time.ParseDuration(s)
	case to.Kind() == reflect.Slice && to.Elem().Kind() == reflect.String:
		return splitList(s), nil
	}
	return data, nil
}

// lookup returns the value at a dotted path of settings, or nil.
func lookup(raw map[string]any, path string) any {
	var cur any = raw
	for seg := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = nil
		for k, v := range m {
			if strings.EqualFold(k, seg) {
				cur = v
			}
		}
	}
	return cur
}

// store sets the value at a dotted path of settings, replacing what was
// there and making the sections on the way.
func store(raw map[string]any, path string, val any) {
	segs := strings.Split(path, ".")
	m := raw
	for _, seg := range segs[:len(segs)-1] {
		next, ok := m[seg].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[seg] = next
		}
		m = next
	}
	m[segs[len(segs)-1]] = val
}

// stringKeys turns the map[any]any a YAML decoder may produce for a
// mapping into map[string]any, all the way down.
func stringKeys(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, el := range x {
			x[k] = stringKeys(el)
		}
		return x
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, el := range x {
			out[fmt.Sprint(k)] = stringKeys(el)
		}
		return out
	case []any:
		for i, el := range x {
			x[i] = stringKeys(el)
		}
	}
	return v
}
