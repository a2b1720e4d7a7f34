package pin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
)

func TestElixirRefused(t *testing.T) {
	const file = "testdata/refused.ex"
	cases := []struct {
		attr     string
		line     string // "file:line @attr" the error must name
		sentinel error
		says     string
	}{
		{"interp", ":6 @interp", ErrNotFixed, "interpolation #{...} on line 7"},
		{"charlist", ":10 @charlist", ErrNotFixed, "charlist"},
		{"piped", ":12 @piped", ErrNotFixed, `goes on with '|' on line 15`},
		{"concat", ":17 @concat", ErrNotFixed, "goes on after the literal"},
		{"computed", ":19 @computed", ErrNotFixed, "not set to a string literal"},
		{"modified", ":21 @modified", ErrNotFixed, "modifiers"},
		{"badescape", ":26 @badescape", ErrSyntax, `\xHH`},
		{"dup", "", ErrBodies, "defined 2 times (testdata/refused.ex:23, testdata/refused.ex:24)"},
		{"missing", "", ErrBodies, "no attribute @missing"},
	}
	for _, c := range cases {
		t.Run(c.attr, func(t *testing.T) {
			_, err := ElixirBodies([]string{file}, []Entry{{Name: "s", Attribute: c.attr, Verb: "ENQUEUE", Keys: 2, Values: 2}})
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, c.sentinel) {
				t.Errorf("error %q does not wrap %v", err, c.sentinel)
			}
			if c.line != "" && !strings.Contains(err.Error(), file+c.line) {
				t.Errorf("error %q does not name %s%s", err, file, c.line)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not say %q", err, c.says)
			}
		})
	}
	// @other is fine: one refused attribute does not spoil the others.
	b, err := ElixirBodies([]string{file}, []Entry{{Name: "s", Attribute: "other", Read: true}})
	if err != nil || string(b[0].Bytes) != "x" {
		t.Errorf("@other = %v, %v", b, err)
	}
}

func TestElixirSyntaxErrors(t *testing.T) {
	_, err := ElixirBodies([]string{"testdata/unterminated.ex"}, DefaultSpec())
	if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "testdata/unterminated.ex") ||
		!strings.Contains(err.Error(), `missing terminator """ for the heredoc starting at line 2`) {
		t.Errorf("error = %v", err)
	}
	for _, src := range []string{
		"@a \"abc",                        // unterminated string
		"@a \"\"\" x\n\"\"\"",             // text after the opening of a heredoc
		"@a \"\xff\"",                     // invalid UTF-8
		"@a \"\u202e\"",                   // bidirectional formatting character
		"@b \"a #{\"}\" <> \"x\"",         // unterminated interpolation
		"@a ~S\"\"\"\nabc\n",              // unterminated sigil heredoc
		"x = \"#{ {1, \"}\"} \n@a \"ok\"", // string in an interpolation, never closed
	} {
		if _, err := ScanElixir([]byte(src)); !errors.Is(err, ErrSyntax) {
			t.Errorf("ScanElixir(%q) error = %v, want ErrSyntax", src, err)
		}
	}
}

func TestElixirEscapes(t *testing.T) {
	// Values by hand from Elixir's escape rules; each literal is one attribute.
	cases := []struct{ src, want string }{
		{`"\u{10FFFF}"`, "\U0010FFFF"},
		{`"\u{41}\u0041"`, "AA"},
		{`"#"`, "#"},
		{`"a#b"`, "a#b"},
		{`"\\#{x}"`, ""}, // \\ then real interpolation: refused
		{`~s|a\|b|`, "a|b"},
		{`~S<a\>b>`, "a>b"},
		{`~s{#{1}}`, ""},
	}
	for _, c := range cases {
		attrs, err := ScanElixir([]byte("@a " + c.src + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if len(attrs) != 1 {
			t.Fatalf("%s: %d attributes", c.src, len(attrs))
		}
		a := attrs[0]
		if c.want == "" {
			if !errors.Is(a.Err, ErrNotFixed) {
				t.Errorf("%s: value %q, err %v; want refused", c.src, a.Value, a.Err)
			}
			continue
		}
		if a.Err != nil || string(a.Value) != c.want {
			t.Errorf("%s = %q, %v; want %q", c.src, a.Value, a.Err, c.want)
		}
	}
	for _, bad := range []string{`"\x4"`, `"\x{41}"`, `"\u{D800}"`, `"\u{110000}"`, `"\u12"`, `"\u{}"`, `"\u{1234567}"`} {
		attrs, err := ScanElixir([]byte("@a " + bad + "\n"))
		if err != nil || len(attrs) != 1 || !errors.Is(attrs[0].Err, ErrSyntax) {
			t.Errorf("%s: attrs %+v, err %v; want an escape error", bad, attrs, err)
		}
	}
}

func TestLuaBodies(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.lua", "return 1\n")
	write("b.lua", "return 2\n")
	spec := []Entry{{Name: "a", Attribute: "a", Verb: "PAUSE", Keys: 1}}
	if _, err := LuaBodies(dir, spec, true); !errors.Is(err, ErrBodies) || !strings.Contains(err.Error(), "b.lua") {
		t.Errorf("strict with an unlisted b.lua: %v", err)
	}
	bodies, err := LuaBodies(dir, spec, false)
	if err != nil || len(bodies) != 1 || string(bodies[0].Bytes) != "return 1\n" {
		t.Fatalf("bodies %+v, %v", bodies, err)
	}
	spec = append(spec, Entry{Name: "c", Attribute: "c", Read: true})
	if _, err := LuaBodies(dir, spec, false); !errors.Is(err, ErrBodies) || !strings.Contains(err.Error(), "script c") {
		t.Errorf("missing c.lua: %v", err)
	}
}

func TestVerify(t *testing.T) {
	m, err := shamap.Load(standMap)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := LuaBodies(standDir, SpecOf(m), false)
	if err != nil {
		t.Fatal(err)
	}
	if bad := Verify(m, bodies); len(bad) != 0 {
		t.Fatalf("mismatches on the stand: %+v", bad)
	}
	// One changed byte in one body, a body missing, a shape changed, an extra body.
	bodies[2].Bytes = append([]byte(nil), bodies[2].Bytes...)
	bodies[2].Bytes[0] ^= 1
	bodies[3].Entry.Keys++
	missing := bodies[4].Entry.Name
	bodies = append(bodies[:4], bodies[5:]...)
	bodies = append(bodies, Body{Entry: Entry{Name: "extra", Read: true}, Bytes: []byte("return 0")})
	bad := Verify(m, bodies)
	got := map[string]shamap.Mismatch{}
	for _, b := range bad {
		got[b.Name] = b
	}
	if len(bad) != 4 || len(got) != 4 {
		t.Fatalf("mismatches %+v, want 4", bad)
	}
	if b := got[m.Scripts[2].Name]; b.Pinned != m.Scripts[2].SHA || b.Actual != shamap.SHA(bodies[2].Bytes) {
		t.Errorf("changed body: %+v", b)
	}
	if b := got[m.Scripts[3].Name]; b.Err == nil || !strings.Contains(b.Actual, "keys=") {
		t.Errorf("changed shape: %+v", b)
	}
	if b := got[missing]; b.Err == nil || b.Actual != "" {
		t.Errorf("missing body: %+v", b)
	}
	if b := got["extra"]; b.Err == nil || b.Pinned != "" {
		t.Errorf("extra body: %+v", b)
	}
}

func TestParseSpec(t *testing.T) {
	good := "- {name: enqueue, attribute: enqueue_lua, verb: ENQUEUE, keys: 2, values: 2}\n- {name: stats, read: true, keys: 6, values: 0}\n"
	spec, err := ParseSpec([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if spec[0].Attribute != "enqueue_lua" || spec[1].Attribute != "stats" || !spec[1].Read || spec[1].Keys != 6 {
		t.Errorf("spec = %+v", spec)
	}
	for _, bad := range []string{
		"",
		"- {name: a, verb: ENQUEUE, keys: 2}", // values missing
		"- {name: a, keys: 2, values: 2}",     // neither verb nor read
		"- {name: a, verb: ENQUEUE, read: true, keys: 2, values: 2}", // both
		"- {name: a, verb: EVAL, keys: 2, values: 2}",                // not a token
		"- {name: a, verb: PAUSE, keys: -1, values: 0}",              // negative
		"- {name: ../a, verb: PAUSE, keys: 1, values: 0}",            // not a plain name
		"- {name: a, attribute: A, verb: PAUSE, keys: 1, values: 0}", // not an attribute name
		"- {name: a, verb: PAUSE, keys: 1, values: 0, shape: 2}",     // unknown field
		"- {name: a, verb: PAUSE, keys: 1, values: 0}\n- {name: a, attribute: b, read: true, keys: 1, values: 0}",
		"- {name: a, verb: PAUSE, keys: 1, values: 0}\n- {name: b, attribute: a, read: true, keys: 1, values: 0}",
	} {
		if _, err := ParseSpec([]byte(bad)); !errors.Is(err, ErrSpec) {
			t.Errorf("ParseSpec(%q) = %v, want ErrSpec", bad, err)
		}
	}
}

func TestBuildRefuses(t *testing.T) {
	e := Entry{Name: "a", Attribute: "a", Read: true}
	f := Entry{Name: "b", Attribute: "b", Read: true}
	same := []Body{{Entry: e, Bytes: []byte("x")}, {Entry: f, Bytes: []byte("x")}}
	if _, _, err := Build(same, DefaultBrand, "s"); !errors.Is(err, shamap.ErrInvalid) {
		t.Errorf("two bodies with one sha: %v", err)
	}
	if _, _, err := Build(same[:1], "echomq:6.0.0", "s"); !errors.Is(err, shamap.ErrInvalid) {
		t.Errorf("module brand: %v", err)
	}
	// Names YAML would read as something else are quoted.
	odd := []Body{{Entry: Entry{Name: "null", Read: true}, Bytes: []byte("x")}, {Entry: Entry{Name: "1.5", Read: true}, Bytes: []byte("y")}}
	m, _, err := Build(odd, DefaultBrand, "a \"quoted\" source: é")
	if err != nil {
		t.Fatal(err)
	}
	if m.Scripts[0].Name != "null" || m.Scripts[1].Name != "1.5" || m.Source != "a \"quoted\" source: é" {
		t.Errorf("map = %+v", m)
	}
}
