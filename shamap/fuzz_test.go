package shamap

import (
	"errors"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add([]byte(validMap))
	f.Add([]byte("legacy_brand: x\nscripts:\n  - {name: a, sha: \"" + shaA + "\", verb: ENQUEUE}\n"))
	f.Add([]byte("legacy_brand: x\nscripts: [~]\n"))
	f.Add([]byte("scripts:\n  - name: a\n    sha: " + shaB + "\n    read: true\n    keys: -1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if m.LegacyBrand == "" || m.LegacyBrand == "echomq:6.0.0" || len(m.Scripts) == 0 || len(m.Digest) != 64 {
			t.Fatalf("accepted map %+v", m)
		}
		for _, s := range m.Scripts {
			if !IsSHA(s.SHA) || s.Name == "" || s.Keys < 0 || s.Values < 0 || s.Read == (s.Verb != "") {
				t.Fatalf("accepted entry %+v", s)
			}
			if s.Verb != "" && (!IsToken(s.Verb) || s.Command != "EMQ."+s.Verb) {
				t.Fatalf("accepted verb %+v", s)
			}
			if got, ok := m.Lookup([]byte(s.SHA)); !ok || got != s {
				t.Fatalf("Lookup(%s) = %+v", s.SHA, got)
			}
			if got, ok := m.ByName(s.Name); !ok || got != s {
				t.Fatalf("ByName(%s) = %+v", s.Name, got)
			}
		}
	})
}
