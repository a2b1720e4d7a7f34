package pin

import (
	"errors"
	"fmt"

	"github.com/emqproxy/emqproxy/shamap"
)

// Verify recomputes every pin of m from bodies and returns the differences
// (none when all match): a body whose sha differs from its pin, a pinned
// script without a body, a body the map does not pin, and, when an entry's
// kind or shape differs from the pin, that difference.
func Verify(m *shamap.Map, bodies []Body) []shamap.Mismatch {
	var out []shamap.Mismatch
	byName := map[string]Body{}
	for _, b := range bodies {
		byName[b.Entry.Name] = b
	}
	for _, s := range m.Scripts {
		b, ok := byName[s.Name]
		if !ok {
			out = append(out, shamap.Mismatch{Name: s.Name, Pinned: s.SHA, Err: errors.New("no body")})
			continue
		}
		delete(byName, s.Name)
		if got := shamap.SHA(b.Bytes); got != s.SHA {
			out = append(out, shamap.Mismatch{Name: s.Name, Pinned: s.SHA, Actual: got})
		}
		pinned, actual := shape(s.Verb, s.Read, s.Keys, s.Values), shape(b.Entry.Verb, b.Entry.Read, b.Entry.Keys, b.Entry.Values)
		if pinned != actual {
			out = append(out, shamap.Mismatch{Name: s.Name, Pinned: pinned, Actual: actual, Err: errors.New("kind or shape differs")})
		}
	}
	for _, b := range bodies {
		if _, ok := byName[b.Entry.Name]; ok {
			out = append(out, shamap.Mismatch{Name: b.Entry.Name, Actual: shamap.SHA(b.Bytes), Err: errors.New("not pinned")})
		}
	}
	return out
}

// shape renders a kind and shape for the mismatch table.
func shape(verb string, read bool, keys, values int) string {
	kind := verb
	if read {
		kind = "read"
	}
	return fmt.Sprintf("%s keys=%d values=%d", kind, keys, values)
}
