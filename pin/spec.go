package pin

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/emqproxy/emqproxy/shamap"
)

// Entry is one script of a spec: its name in the map, where its body is
// found, and the kind and shape to pin.
type Entry struct {
	// Name is the script's name in the map and, for a .lua folder, the
	// file's base name.
	Name string
	// Attribute is the Elixir module attribute that holds the body
	// (without "@"); it defaults to Name.
	Attribute string
	// Verb is the job-core token of a verb script; empty for a read.
	Verb string
	// Read marks a declared read script.
	Read bool
	// Keys and Values are the pinned numbers of keys and values.
	Keys, Values int
}

type entryYAML struct {
	Name      string `yaml:"name"`
	Attribute string `yaml:"attribute"`
	Verb      string `yaml:"verb"`
	Read      bool   `yaml:"read"`
	Keys      *int   `yaml:"keys"`
	Values    *int   `yaml:"values"`
}

//go:embed default_spec.yaml
var defaultSpec []byte

// DefaultSpec returns the spec of the legacy wire-4 release, the one the
// stand's scripts and stand/map.yaml describe. Names are the .lua base names
// and the attribute names.
func DefaultSpec() []Entry {
	spec, err := ParseSpec(defaultSpec)
	if err != nil {
		panic(err) // the embedded file is checked by the tests
	}
	return spec
}

// LoadSpec reads and validates the spec file at path.
func LoadSpec(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpec, err)
	}
	spec, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

// ParseSpec validates a spec from its YAML bytes: a list of entries such
// as {name: enqueue, attribute: enqueue, verb: ENQUEUE, keys: 2, values: 2}
// or {name: stats, read: true, keys: 6, values: 0}. The attribute defaults
// to the name; keys and values are required.
func ParseSpec(data []byte) ([]Entry, error) {
	var raw []entryYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: no entries", ErrSpec)
	}
	names := map[string]bool{}
	attrs := map[string]bool{}
	out := make([]Entry, 0, len(raw))
	for i, r := range raw {
		where := fmt.Sprintf("entry %d (%s)", i+1, r.Name)
		switch {
		case !isScriptName(r.Name):
			return nil, fmt.Errorf("%w: %s: name must be letters, digits, '_', '-' or '.'", ErrSpec, where)
		case r.Read && r.Verb != "":
			return nil, fmt.Errorf("%w: %s: both verb and read are set", ErrSpec, where)
		case !r.Read && r.Verb == "":
			return nil, fmt.Errorf("%w: %s: neither verb nor read is set", ErrSpec, where)
		case r.Verb != "" && !shamap.IsToken(r.Verb):
			return nil, fmt.Errorf("%w: %s: verb %q is not a job-core token", ErrSpec, where, r.Verb)
		case r.Keys == nil || r.Values == nil:
			return nil, fmt.Errorf("%w: %s: keys and values must both be given", ErrSpec, where)
		case *r.Keys < 0 || *r.Values < 0:
			return nil, fmt.Errorf("%w: %s: keys and values must not be negative", ErrSpec, where)
		}
		e := Entry{Name: r.Name, Attribute: r.Attribute, Verb: r.Verb, Read: r.Read, Keys: *r.Keys, Values: *r.Values}
		if e.Attribute == "" {
			e.Attribute = e.Name
		}
		if !isAttrName(e.Attribute) {
			return nil, fmt.Errorf("%w: %s: %q is not an attribute name", ErrSpec, where, e.Attribute)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%w: %s: name is listed twice", ErrSpec, where)
		}
		if attrs[e.Attribute] {
			return nil, fmt.Errorf("%w: %s: attribute @%s is listed twice", ErrSpec, where, e.Attribute)
		}
		names[e.Name], attrs[e.Attribute] = true, true
		out = append(out, e)
	}
	return out, nil
}

// isScriptName reports whether s can name a script and its .lua file.
func isScriptName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isIdentChar(c) && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// isAttrName reports whether s is a plain lower-case Elixir identifier.
func isAttrName(s string) bool {
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}

func isIdentStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') }

func isIdentChar(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}
