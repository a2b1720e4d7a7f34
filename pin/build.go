package pin

import (
	"fmt"

	"github.com/emqproxy/emqproxy/shamap"
)

// DefaultBrand is the legacy brand a map records unless told otherwise.
const DefaultBrand = "echomq:4.0.0"

// Build pins bodies into a map for the legacy brand, recording source (for
// example the commit the bodies came from). It returns the map as shamap
// loads it and its canonical text; a set of bodies shamap would refuse (two
// scripts with one sha, a bad brand) is refused here.
func Build(bodies []Body, brand, source string) (*shamap.Map, []byte, error) {
	m := &shamap.Map{LegacyBrand: brand, Source: source}
	for _, b := range bodies {
		m.Scripts = append(m.Scripts, &shamap.Script{
			Name: b.Entry.Name, SHA: shamap.SHA(b.Bytes), Verb: b.Entry.Verb, Read: b.Entry.Read,
			Keys: b.Entry.Keys, Values: b.Entry.Values,
		})
	}
	text := Format(m)
	loaded, err := shamap.Parse(text)
	if err != nil {
		return nil, nil, fmt.Errorf("pin: %w", err)
	}
	if loaded.LegacyBrand != brand || loaded.Source != source || len(loaded.Scripts) != len(bodies) {
		return nil, nil, fmt.Errorf("%w: the map text does not read back as written", ErrSpec)
	}
	for i, s := range loaded.Scripts {
		if s.Name != bodies[i].Entry.Name {
			return nil, nil, fmt.Errorf("%w: name %q does not read back as written", ErrSpec, bodies[i].Entry.Name)
		}
	}
	return loaded, text, nil
}

// SpecOf is the spec a map implies: its scripts in order, each attribute
// named like its script.
func SpecOf(m *shamap.Map) []Entry {
	out := make([]Entry, 0, len(m.Scripts))
	for _, s := range m.Scripts {
		out = append(out, Entry{Name: s.Name, Attribute: s.Name, Verb: s.Verb, Read: s.Read, Keys: s.Keys, Values: s.Values})
	}
	return out
}
