package pin

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

var update = flag.Bool("update", false, "rewrite testdata/stand_scripts.ex from stand/scripts")

const (
	standDir     = "../stand/scripts"
	standMap     = "../stand/map.yaml"
	standElixir  = "testdata/stand_scripts.ex"
	standElixir2 = "testdata/stand_scripts_plain.ex"
)

// samePins fails unless got pins exactly the scripts of want, in order.
func samePins(t *testing.T, got, want *shamap.Map) {
	t.Helper()
	if len(got.Scripts) != len(want.Scripts) {
		t.Fatalf("%d scripts, want %d", len(got.Scripts), len(want.Scripts))
	}
	for i, w := range want.Scripts {
		g := got.Scripts[i]
		if g.Name != w.Name || g.SHA != w.SHA || g.Verb != w.Verb || g.Read != w.Read || g.Keys != w.Keys || g.Values != w.Values {
			t.Errorf("script %d = %+v, want %+v", i, *g, *w)
		}
	}
}

func TestPinStandLua(t *testing.T) {
	want, err := shamap.Load(standMap)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := LuaBodies(standDir, DefaultSpec(), true)
	if err != nil {
		t.Fatal(err)
	}
	got, text, err := Build(bodies, DefaultBrand, "stand/scripts")
	if err != nil {
		t.Fatal(err)
	}
	samePins(t, got, want)
	if got.LegacyBrand != want.LegacyBrand || got.Source != want.Source {
		t.Errorf("brand, source = %q, %q; want %q, %q", got.LegacyBrand, got.Source, want.LegacyBrand, want.Source)
	}
	// The canonical text differs from stand/map.yaml only in its comment.
	if a, b := uncommented(text), uncommented(mustRead(t, standMap)); a != b {
		t.Errorf("map text differs from %s:\n%s\nwant:\n%s", standMap, a, b)
	}
	if bad := Verify(want, bodies); len(bad) != 0 {
		t.Errorf("verify stand map: %+v", bad)
	}
}

// TestPinStandElixir pins the Elixir fixtures that hold the stand's bodies:
// one in indented heredocs, one in plain strings with escapes. Both must pin
// stand/map.yaml's shas. The fixtures were written by writeStandFixtures
// (go test ./pin -run TestPinStandElixir -update) and checked with Elixir
// 1.14: compiling them and hashing each attribute printed the map's shas.
func TestPinStandElixir(t *testing.T) {
	if *update {
		writeStandFixtures(t)
	}
	want, err := shamap.Load(standMap)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{standElixir, standElixir2} {
		t.Run(f, func(t *testing.T) {
			bodies, err := ElixirBodies([]string{f}, DefaultSpec())
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := Build(bodies, DefaultBrand, "stand/scripts")
			if err != nil {
				t.Fatal(err)
			}
			samePins(t, got, want)
			for _, b := range bodies {
				if len(b.Warnings) > 0 {
					t.Errorf("%s: warnings %q", b.Origin, b.Warnings)
				}
			}
		})
	}
}

// TestDefaultSpecIsStand checks the built-in spec against the stand's
// shapes and stand/map.yaml.
func TestDefaultSpecIsStand(t *testing.T) {
	spec := DefaultSpec()
	if len(spec) != len(scripts.Shapes) {
		t.Fatalf("%d entries, stand has %d", len(spec), len(scripts.Shapes))
	}
	for i, s := range scripts.Shapes {
		e := spec[i]
		if e.Name != s.Name || e.Attribute != s.Name || e.Verb != s.Verb || e.Read != s.Read || e.Keys != s.Keys || e.Values != s.Values {
			t.Errorf("entry %d = %+v, stand has %+v", i, e, s)
		}
	}
	m, err := shamap.Load(standMap)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range SpecOf(m) {
		if e != spec[i] {
			t.Errorf("entry %d = %+v, stand/map.yaml has %+v", i, spec[i], e)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func uncommented(b []byte) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// writeStandFixtures writes the stand's bodies as Elixir module attributes,
// escaping what a string literal would otherwise read differently.
func writeStandFixtures(t *testing.T) {
	var heredocs, plain bytes.Buffer
	head := "# The stand's script bodies (stand/scripts/*.lua) as module attributes, for\n" +
		"# the test that pins them from Elixir. Rewrite with:\n" +
		"#   go test ./pin -run TestPinStandElixir -update\n"
	heredocs.WriteString(head + "defmodule Stand.Scripts do\n")
	plain.WriteString(head + "defmodule Stand.ScriptsPlain do\n")
	for _, e := range DefaultSpec() {
		body := string(mustRead(t, standDir+"/"+e.Name+".lua"))
		heredocs.WriteString(heredocAttr(e.Name, body) + "\n")
		plain.WriteString(plainAttr(e.Name, body) + "\n")
	}
	heredocs.WriteString("  def all, do: [" + attrList() + "]\nend\n")
	plain.WriteString("  def all, do: [" + attrList() + "]\nend\n")
	if err := os.WriteFile(standElixir, heredocs.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(standElixir2, plain.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// heredocAttr writes body as an attribute set to a heredoc indented by six
// spaces, escaping what the heredoc would otherwise read differently; a body
// without a final new line ends with a line continuation.
func heredocAttr(name, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  @%s \"\"\"\n", name)
	esc := strings.NewReplacer(`\`, `\\`, `#{`, `\#{`, `"""`, `\"""`).Replace(body)
	lines := strings.Split(esc, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] += `\`
	}
	for _, l := range lines {
		if l != "" {
			b.WriteString("      " + l)
		}
		b.WriteString("\n")
	}
	b.WriteString("      \"\"\"\n")
	return b.String()
}

// plainAttr writes body as an attribute set to a plain string: each new
// line written as \n and continued with a backslash, so the source stays
// readable line by line.
func plainAttr(name, body string) string {
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `#{`, `\#{`, "\n", "\\n\\\n").Replace(body)
	return fmt.Sprintf("  @%s \"%s\"\n", name, esc)
}

func attrList() string {
	var parts []string
	for _, e := range DefaultSpec() {
		parts = append(parts, e.Name+": @"+e.Name)
	}
	return strings.Join(parts, ", ")
}
