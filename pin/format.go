package pin

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/emqproxy/emqproxy/shamap"
)

// Format renders m in the canonical form of a map file: a header comment,
// the legacy brand and source, then one flow-style line per script in the
// map's order, as in stand/map.yaml.
func Format(m *shamap.Map) []byte {
	var b bytes.Buffer
	b.WriteString("# Pinned script map: each script's SHA-1, its job-core token (or read)\n")
	b.WriteString("# and its shape. Written by `emqproxy map pin`; check it with `emqproxy map verify`.\n")
	fmt.Fprintf(&b, "legacy_brand: %s\n", strconv.Quote(m.LegacyBrand))
	fmt.Fprintf(&b, "source: %s\n", strconv.Quote(m.Source))
	b.WriteString("scripts:\n")
	for _, s := range m.Scripts {
		kind := "verb: " + s.Verb
		if s.Read {
			kind = "read: true"
		}
		fmt.Fprintf(&b, "  - {name: %s, sha: %q, %s, keys: %d, values: %d}\n", yamlName(s.Name), s.SHA, kind, s.Keys, s.Values)
	}
	return b.Bytes()
}

// yamlName writes a script name plain when YAML reads it back as the same
// string, and quoted otherwise.
func yamlName(name string) string {
	switch name {
	case "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~":
		return strconv.Quote(name)
	}
	if !isAttrName(name) {
		return strconv.Quote(name)
	}
	return name
}
