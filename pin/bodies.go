package pin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Body is the body found for one spec entry.
type Body struct {
	Entry Entry
	// Bytes is the script exactly as the server hashes it.
	Bytes []byte
	// Origin says where the body came from: "dir/name.lua" or "file.ex:12 @name".
	Origin string
	// Warnings are what Elixir would warn about while compiling the body.
	Warnings []string
}

// LuaBodies reads <dir>/<name>.lua for every entry of spec, in spec order.
// With strict set, a .lua file in dir that spec does not name is an error,
// so that pinning a folder never drops a script silently.
func LuaBodies(dir string, spec []Entry, strict bool) ([]Body, error) {
	var out []Body
	var errs []error
	for _, e := range spec {
		path := filepath.Join(dir, e.Name+".lua")
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: script %s: %w", ErrBodies, e.Name, err))
			continue
		}
		out = append(out, Body{Entry: e, Bytes: data, Origin: path})
	}
	if strict {
		files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBodies, err)
		}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), ".lua")
			if !slices.ContainsFunc(spec, func(e Entry) bool { return e.Name == name }) {
				errs = append(errs, fmt.Errorf("%w: %s: the spec has no entry %q (add one, or remove the file)", ErrBodies, f, name))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ElixirBodies evaluates, in the given Elixir source files, the module
// attribute of every entry of spec. Every entry's attribute must be defined
// exactly once across the files and evaluate to a fixed string; each
// failure names the file, the line and the attribute.
func ElixirBodies(files []string, spec []Entry) ([]Body, error) {
	type found struct {
		attr Attr
		file string
	}
	wanted := map[string]bool{}
	for _, e := range spec {
		wanted[e.Attribute] = true
	}
	defs := map[string][]found{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBodies, err)
		}
		attrs, err := ScanElixir(src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, a := range attrs {
			if wanted[a.Name] {
				defs[a.Name] = append(defs[a.Name], found{a, f})
			}
		}
	}
	var out []Body
	var errs []error
	for _, e := range spec {
		d := defs[e.Attribute]
		switch {
		case len(d) == 0:
			errs = append(errs, fmt.Errorf("%w: script %s: no attribute @%s in %s", ErrBodies, e.Name, e.Attribute, strings.Join(files, ", ")))
			continue
		case len(d) > 1:
			var at []string
			for _, x := range d {
				at = append(at, fmt.Sprintf("%s:%d", x.file, x.attr.Line))
			}
			errs = append(errs, fmt.Errorf("%w: script %s: @%s is defined %d times (%s)", ErrBodies, e.Name, e.Attribute, len(d), strings.Join(at, ", ")))
			continue
		}
		a, f := d[0].attr, d[0].file
		origin := fmt.Sprintf("%s:%d @%s", f, a.Line, a.Name)
		if a.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", origin, a.Err))
			continue
		}
		b := Body{Entry: e, Bytes: a.Value, Origin: origin}
		if a.Outdented != 0 {
			b.Warnings = append(b.Warnings, fmt.Sprintf("%s:%d: outdented heredoc line in @%s (Elixir strips only the indentation the line has)", f, a.Outdented, a.Name))
		}
		out = append(out, b)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
