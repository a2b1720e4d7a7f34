package shamap

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	shaA = "f44394af848b4027b5e544c86de2c76c938546d9"
	shaB = "87cc0a1199b530dc88271d1d8a878900b902fff0"
	shaC = "7d47cfd3b0cfa356453d53792c51b6b3ca3e8092"
)

const validMap = `legacy_brand: "echomq:4.0.0"
source: "stand/scripts"
scripts:
  - {name: enqueue, sha: "` + shaA + `", verb: ENQUEUE, keys: 2, values: 2}
  - {name: claim2, sha: "` + shaB + `", verb: CLAIM, keys: 2, values: 1}
  - {name: stats, sha: "` + shaC + `", read: true, keys: 6, values: 0}
`

// writeMap writes a map file into a temporary directory and returns its path.
func writeMap(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "map.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadValid(t *testing.T) {
	path := writeMap(t, validMap)
	m, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if m.Path != path || m.LegacyBrand != "echomq:4.0.0" || m.Source != "stand/scripts" || len(m.Scripts) != 3 {
		t.Fatalf("map = %+v", m)
	}
	enq, ok := m.ByName("enqueue")
	if !ok || enq.SHA != shaA || enq.Verb != "ENQUEUE" || enq.Command != "EMQ.ENQUEUE" || enq.Keys != 2 || enq.Values != 2 {
		t.Errorf("enqueue = %+v", enq)
	}
	stats, ok := m.ByName("stats")
	if !ok || !stats.Read || stats.Command != "" || stats.Keys != 6 {
		t.Errorf("stats = %+v", stats)
	}
	if _, ok := m.ByName("nope"); ok {
		t.Error("ByName found an unknown name")
	}
	if got := m.UsedTokens(); !slices.Equal(got, []string{"CLAIM", "ENQUEUE"}) {
		t.Errorf("UsedTokens = %v", got)
	}
}

func TestLoadInvalid(t *testing.T) {
	entry := func(name, sha, rest string) string {
		return "  - {name: " + name + ", sha: \"" + sha + "\", " + rest + "}\n"
	}
	head := "legacy_brand: \"echomq:4.0.0\"\nscripts:\n"
	first := entry("enqueue", shaA, "verb: ENQUEUE, keys: 2, values: 2")
	cases := []struct {
		name string
		text string
		want []string // every part must appear in the error
	}{
		{name: "no brand", text: "scripts:\n" + first, want: []string{"legacy_brand is empty"}},
		{name: "module brand", text: "legacy_brand: \"echomq:6.0.0\"\nscripts:\n" + first,
			want: []string{`legacy_brand "echomq:6.0.0" is the module's brand`}},
		{name: "no scripts", text: "legacy_brand: \"x\"\n", want: []string{"no scripts"}},
		{name: "empty entry", text: head + first + "  -\n", want: []string{"scripts[1] is empty"}},
		{name: "no name", text: head + first + "  - {sha: \"" + shaB + "\", read: true}\n",
			want: []string{"scripts[1] ()", "name is empty"}},
		{name: "short sha", text: head + first + entry("claim2", "abc", "verb: CLAIM"),
			want: []string{"scripts[1] (claim2)", `sha "abc" is not 40 lower-case hex digits`}},
		{name: "upper-case sha", text: head + entry("enqueue", strings.ToUpper(shaA), "verb: ENQUEUE"),
			want: []string{"scripts[0] (enqueue)", "is not 40 lower-case hex digits"}},
		{name: "verb and read", text: head + first + entry("claim2", shaB, "verb: CLAIM, read: true"),
			want: []string{"scripts[1] (claim2)", "both verb and read are set"}},
		{name: "neither", text: head + first + entry("claim2", shaB, "keys: 1"),
			want: []string{"scripts[1] (claim2)", "neither verb nor read is set"}},
		{name: "unknown token", text: head + first + entry("claim2", shaB, "verb: GRAB"),
			want: []string{"scripts[1] (claim2)", `verb "GRAB" is not a job-core token`}},
		{name: "lower-case token", text: head + entry("claim2", shaB, "verb: claim"),
			want: []string{"scripts[0] (claim2)", `verb "claim" is not a job-core token`}},
		{name: "negative keys", text: head + first + entry("claim2", shaB, "verb: CLAIM, keys: -1"),
			want: []string{"scripts[1] (claim2)", "keys and values must not be negative"}},
		{name: "negative values", text: head + first + entry("claim2", shaB, "verb: CLAIM, values: -2"),
			want: []string{"scripts[1] (claim2)", "keys and values must not be negative"}},
		{name: "duplicate sha", text: head + first + entry("other", shaA, "read: true"),
			want: []string{"scripts[1] (other)", "sha " + shaA + " is pinned twice"}},
		{name: "duplicate name", text: head + first + entry("enqueue", shaB, "read: true"),
			want: []string{"scripts[1] (enqueue)", "name is pinned twice"}},
		{name: "unknown field", text: head + entry("enqueue", shaA, "verb: ENQUEUE, kind: verb"),
			want: []string{"field kind not found"}},
		{name: "not yaml", text: "legacy_brand: [\n", want: []string{"invalid map"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeMap(t, c.text)
			_, err := Load(path)
			if err == nil {
				t.Fatal("Load accepted an invalid map")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			msg := err.Error()
			for _, part := range append([]string{path}, c.want...) {
				if !strings.Contains(msg, part) {
					t.Errorf("error %q does not contain %q", msg, part)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(path)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Load of a missing file: %v", err)
	}
}

func TestDigest(t *testing.T) {
	a, err := Parse([]byte(validMap))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte(validMap))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(validMap))
	if a.Digest != hex.EncodeToString(sum[:]) || a.Digest != b.Digest {
		t.Errorf("digest %s, %s, want the SHA-256 of the file %x", a.Digest, b.Digest, sum)
	}
	// The digest is of the file's bytes: a comment changes it.
	c, err := Parse([]byte("# reviewed\n" + validMap))
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Error("digest did not change with the file's bytes")
	}
}

func TestLookup(t *testing.T) {
	m, err := Parse([]byte(validMap))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sha  string
		want string // script name, "" for none
	}{
		{name: "lower case", sha: shaA, want: "enqueue"},
		{name: "upper case", sha: strings.ToUpper(shaB), want: "claim2"},
		{name: "mixed case", sha: "7D47cfd3b0cfa356453d53792c51b6b3ca3e8092", want: "stats"},
		{name: "unknown", sha: "0000000000000000000000000000000000000000"},
		{name: "short", sha: shaA[:39]},
		{name: "long", sha: shaA + "0"},
		{name: "empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, ok := m.Lookup([]byte(c.sha))
			if c.want == "" {
				if ok || s != nil {
					t.Fatalf("Lookup(%q) = %+v", c.sha, s)
				}
				return
			}
			if !ok || s.Name != c.want {
				t.Fatalf("Lookup(%q) = %+v, %v, want %s", c.sha, s, ok, c.want)
			}
		})
	}
	sha := []byte(shaA)
	if n := testing.AllocsPerRun(100, func() { m.Lookup(sha) }); n != 0 {
		t.Errorf("Lookup of a lower-case sha allocates %v times", n)
	}
	if s, ok := m.LookupBody([]byte("return 1")); ok {
		t.Errorf("LookupBody found %+v", s)
	}
}

func TestLookupBodyAndVerify(t *testing.T) {
	dir := t.TempDir()
	bodies := map[string]string{"enqueue": "return 'enqueue'", "stats": "return 'stats'"}
	for name, b := range bodies {
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := "legacy_brand: \"echomq:4.0.0\"\nscripts:\n" +
		"  - {name: enqueue, sha: \"" + SHA([]byte(bodies["enqueue"])) + "\", verb: ENQUEUE, keys: 2, values: 2}\n" +
		"  - {name: stats, sha: \"" + shaC + "\", read: true, keys: 6}\n" +
		"  - {name: claim2, sha: \"" + shaB + "\", verb: CLAIM, keys: 2, values: 1}\n"
	m, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := m.LookupBody([]byte(bodies["enqueue"])); !ok || s.Name != "enqueue" {
		t.Errorf("LookupBody(enqueue body) = %+v, %v", s, ok)
	}
	bad := m.VerifyBodies(dir)
	if len(bad) != 2 {
		t.Fatalf("VerifyBodies = %+v, want stats (wrong pin) and claim2 (missing)", bad)
	}
	if bad[0].Name != "stats" || bad[0].Pinned != shaC || bad[0].Actual != SHA([]byte(bodies["stats"])) || bad[0].Err != nil {
		t.Errorf("stats mismatch = %+v", bad[0])
	}
	if bad[1].Name != "claim2" || bad[1].Actual != "" || !errors.Is(bad[1].Err, os.ErrNotExist) {
		t.Errorf("claim2 mismatch = %+v", bad[1])
	}
}

func TestSHAAndIsSHA(t *testing.T) {
	// The server's sha of "return 1" (SCRIPT LOAD "return 1").
	if got := SHA([]byte("return 1")); got != "e0e1f9fabfc9d4800c877a703b823ac0578ff8db" {
		t.Errorf("SHA = %s", got)
	}
	for s, want := range map[string]bool{
		shaA: true, strings.ToUpper(shaA): false, shaA[:39]: false, shaA[:39] + "g": false, "": false,
	} {
		if IsSHA(s) != want {
			t.Errorf("IsSHA(%q) = %v", s, !want)
		}
	}
	if !IsToken("REQUEUE") || IsToken("requeue") || len(Tokens) != 14 {
		t.Errorf("tokens: %v", Tokens)
	}
}
