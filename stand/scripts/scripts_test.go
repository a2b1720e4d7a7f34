package scripts

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
)

func TestNamesAndBodies(t *testing.T) {
	names := Names()
	var want []string
	for _, s := range Shapes {
		want = append(want, s.Name)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("Names() = %v, want %v", names, want)
	}
	for _, name := range names {
		body := Body(name)
		if len(body) == 0 {
			t.Fatalf("%s: empty body", name)
		}
		if bytes.HasPrefix(body, []byte("#!")) {
			t.Errorf("%s: a shebang line would change its sha", name)
		}
	}
	if Body("nope") != nil || Body("../map") != nil {
		t.Fatal("Body of an unknown script is not nil")
	}
}

// TestPinnedMapIsUpToDate fails when a body changed and stand/map.yaml was
// not regenerated (go generate ./stand/scripts).
func TestPinnedMapIsUpToDate(t *testing.T) {
	m, err := shamap.Load("../map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, mm := range m.VerifyBodies(".") {
		t.Errorf("%s: pinned %s, body hashes to %s %v; run go generate ./stand/scripts",
			mm.Name, mm.Pinned, mm.Actual, mm.Err)
	}
	if m.LegacyBrand != LegacyBrand || m.Source != Source {
		t.Errorf("map brand %q source %q", m.LegacyBrand, m.Source)
	}
	if len(m.Scripts) != len(Shapes) {
		t.Fatalf("map pins %d scripts, want %d", len(m.Scripts), len(Shapes))
	}
	for i, s := range Shapes {
		p := m.Scripts[i]
		if p.Name != s.Name || p.Verb != s.Verb || p.Read != s.Read || p.Keys != s.Keys || p.Values != s.Values {
			t.Errorf("map entry %d = %+v, want %+v", i, *p, s)
		}
	}
	data, err := PinnedMap()
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("../map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, data) {
		t.Error("stand/map.yaml differs from the generated map; run go generate ./stand/scripts")
	}
	used := m.UsedTokens()
	if len(used) != 12 {
		t.Errorf("the map declares %d tokens, want the twelve scripted ones: %v", len(used), used)
	}
}
