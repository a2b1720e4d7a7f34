package scripts

import (
	"bytes"
	"fmt"

	"github.com/emqproxy/emqproxy/shamap"
)

// LegacyBrand is the brand the wire-4 connector writes on the stand.
const LegacyBrand = "echomq:4.0.0"

// Source names where the pinned bodies come from, relative to the repository root.
const Source = "stand/scripts"

// Shape is the pinned shape of one script: the job-core token it declares
// (or Read for a declared read) and its counts of keys and values.
type Shape struct {
	Name   string
	Verb   string
	Read   bool
	Keys   int
	Values int
}

// Shapes lists every script in the order of the job-core contract: the
// twelve verb scripts, then the two reads.
var Shapes = []Shape{
	{Name: "enqueue", Verb: "ENQUEUE", Keys: 2, Values: 2},
	{Name: "claim2", Verb: "CLAIM", Keys: 2, Values: 1},
	{Name: "extend", Verb: "EXTEND", Keys: 2, Values: 2},
	{Name: "complete", Verb: "COMPLETE", Keys: 3, Values: 1},
	{Name: "fail", Verb: "FAIL", Keys: 4, Values: 4},
	{Name: "retry", Verb: "RETRY", Keys: 3, Values: 1},
	{Name: "cancel", Verb: "CANCEL", Keys: 3, Values: 1},
	{Name: "promote", Verb: "PROMOTE", Keys: 2, Values: 1},
	{Name: "reap", Verb: "REAP", Keys: 3, Values: 2},
	{Name: "pause", Verb: "PAUSE", Keys: 1, Values: 0},
	{Name: "resume", Verb: "RESUME", Keys: 1, Values: 0},
	{Name: "remove", Verb: "REMOVE", Keys: 6, Values: 1},
	{Name: "stats", Read: true, Keys: 6, Values: 0},
	{Name: "peek", Read: true, Keys: 1, Values: 0},
}

// PinnedMap renders the pinned map of the embedded bodies, byte for byte
// what stand/map.yaml must hold. It fails when a shape names a missing body.
func PinnedMap() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# The pinned map of the stand's wire-4 scripts: the SHA-1 of each body's\n")
	b.WriteString("# bytes, its job-core token (or read) and its shape. Regenerate with\n")
	b.WriteString("# `go generate ./stand/scripts` after changing a body.\n")
	fmt.Fprintf(&b, "legacy_brand: %q\n", LegacyBrand)
	fmt.Fprintf(&b, "source: %q\n", Source)
	b.WriteString("scripts:\n")
	for _, s := range Shapes {
		body := Body(s.Name)
		if body == nil {
			return nil, fmt.Errorf("scripts: no body for %q", s.Name)
		}
		kind := "verb: " + s.Verb
		if s.Read {
			kind = "read: true"
		}
		fmt.Fprintf(&b, "  - {name: %s, sha: %q, %s, keys: %d, values: %d}\n",
			s.Name, shamap.SHA(body), kind, s.Keys, s.Values)
	}
	return b.Bytes(), nil
}
