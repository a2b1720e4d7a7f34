package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// ErrRestartRequired is wrapped by CheckReload's refusal of a change a
// reload cannot apply.
var ErrRestartRequired = errors.New("config: a reload cannot change")

// reloadable are the keys a reload applies to the running proxy (with
// every key beneath them): cmd/emqproxy's reload swaps each in. Every other
// key is fixed for the process's life, and a reload that changes one is
// refused, naming it. A key added to Config is fixed until it is listed
// here and the reload applies it. docs/operations.md's reload table lists
// the same keys (TestReloadTableInTheDocs).
var reloadable = []string{
	"map",
	"routes",
	"policy.unknown_scripts",
	"policy.deny",
	"policy.allow",
	"auth.password",
	"auth.users",
	"log.level",
}

// Reloadable returns the keys a reload applies (docs/operations.md).
func Reloadable() []string { return slices.Clone(reloadable) }

// IsReloadable reports whether a reload may change key (a key Changed
// returns: a value, a list, or an entry of a map).
func IsReloadable(key string) bool {
	for _, r := range reloadable {
		if key == r || strings.HasPrefix(key, r+".") || strings.HasPrefix(key, r+"[") {
			return true
		}
	}
	return false
}

// Changed returns the keys whose values differ between a and b, in the
// order of Config's fields (map entries by name). A map entry present in
// only one of them is one key (upstreams.module-b); a list is one key.
func Changed(a, b *Config) []string {
	var out []string
	changed(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), "", &out)
	return out
}

// changed appends the keys under path whose values differ in a and b.
func changed(a, b reflect.Value, path string, out *[]string) {
	switch a.Kind() {
	case reflect.Struct:
		for _, f := range fields(a.Type()) {
			changed(a.Field(f.index), b.Field(f.index), join(path, f.name), out)
		}
	case reflect.Map:
		names := map[string]reflect.Value{}
		for _, k := range append(a.MapKeys(), b.MapKeys()...) {
			names[k.String()] = k
		}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			av, bv := a.MapIndex(names[name]), b.MapIndex(names[name])
			if !av.IsValid() || !bv.IsValid() {
				*out = append(*out, join(path, name))
				continue
			}
			changed(av, bv, join(path, name), out)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	}
}

// CheckReload returns nil when every key that differs between the running
// configuration and the next one is reloadable; else an error naming each
// key that is not (never its value: it may be a secret).
func CheckReload(running, next *Config) error {
	var fixed []string
	for _, k := range Changed(running, next) {
		if !IsReloadable(k) {
			fixed = append(fixed, k)
		}
	}
	if len(fixed) > 0 {
		return fmt.Errorf("%w: %s; restart to apply", ErrRestartRequired, strings.Join(fixed, ", "))
	}
	return nil
}
