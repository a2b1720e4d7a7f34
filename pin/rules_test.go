package pin

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"testing"
)

// ruleCases are the attributes of testdata/rules.ex. For each, want is the
// value evaluated by hand from the literal, following Elixir's rules, and
// sha is the SHA-1 Elixir itself computed for the attribute: the output of
// `elixir pin/testdata/oracle.exs` (Elixir 1.14.0, Erlang/OTP 24, Debian
// bookworm's elixir package). The test checks the two against each other
// first (so a hand evaluation that disagrees with Elixir fails), and then
// the scanner against both. Neither number comes from the code under test.
var ruleCases = []struct {
	attr string
	want string
	sha  string
}{
	{"indent", "local a = 1\n  local b = 2\nreturn a + b\n", "cdc01daad05e0f0c4b22f8e15de56579fc0e3f26"},
	{"flush", "  kept as is\n", "9640aeadf4901fa034a78cd1e54f92800336d903"},
	{"escapes", "\x00\a\b\x7f\x1b\f\n\r \t\v|\\|\"|#{x}|A\xff|\u00e9\U0001F600|q|#", "a40fd8c3c2c9615e26ece19ac2cfd89591e04717"},
	{"heredoc_escapes", "tab\there \"quoted\" \"\"\"triple\"\"\" #{brace} #{x}\n", "2c74edc7a5c2722c1ee6c3a88b58e2342241eb49"},
	{"continued", "redis.call('SET', KEYS[1],   ARGV[1])\nreturn 1", "b7f493a42116220db2d6d448aa3e9ce1b77745f4"},
	{"plain", "line one\n  line two", "d28791864c9531505bc4d9b676010af1115759b1"},
	{"multiline", "a\n  b", "e60a8d610f11ace406a8440a8661ac0bafdeb20e"},
	{"raw", "no \\n escape, no #{interpolation}, \\\ncontinuation kept \"\"\"\n", "70ab34058037e2fa615871089c29407270ab1d43"},
	{"raw_line", "a\\nb#{c}", "824af166b615c20175cf7f49ef97b982f5892abd"},
	{"lower", "tab\tend", "aee26a8ddb5c841426fdc590578f14586d8fb7f1"},
	{"outdented", "  deep\nnormal\nshallow\n\n      \n", "5e284d3709a6d87f7b2ae9b5906d558663056f63"},
	{"tabs", "\tthree tabs\n  two spaces\n", "4214f40f7c16804f8069f05fb65df9158c9b9e48"},
	{"empty", "", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
	{"spaced", "x\n", "6fcf9dfbd479ed82697fee719b9f8c610a11ff2a"},
}

func sha1hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func scanFile(t *testing.T, path string) map[string]Attr {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := ScanElixir(src)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]Attr{}
	for _, a := range attrs {
		if _, dup := out[a.Name]; dup {
			t.Fatalf("%s: @%s found twice", path, a.Name)
		}
		out[a.Name] = a
	}
	return out
}

func TestElixirRules(t *testing.T) {
	attrs := scanFile(t, "testdata/rules.ex")
	for _, c := range ruleCases {
		t.Run(c.attr, func(t *testing.T) {
			if got := sha1hex(c.want); got != c.sha {
				t.Fatalf("hand evaluation %q hashes to %s, Elixir said %s", c.want, got, c.sha)
			}
			a, ok := attrs[c.attr]
			if !ok {
				t.Fatalf("@%s not found", c.attr)
			}
			if a.Err != nil {
				t.Fatalf("@%s: %v", c.attr, a.Err)
			}
			if string(a.Value) != c.want {
				t.Errorf("@%s = %q, want %q", c.attr, a.Value, c.want)
			}
		})
	}
	// The attribute with interpolation that is no script is found, refused,
	// and does not stop the scan.
	if a := attrs["moduledoc"]; a.Err == nil {
		t.Errorf("@moduledoc with interpolation has a value %q", a.Value)
	}
	// Nothing inside a string, a comment or after ?" is taken for an attribute.
	for _, name := range []string{"commented", "inside", "x"} {
		if _, ok := attrs[name]; ok {
			t.Errorf("@%s found, but it is inside a comment or a string", name)
		}
	}
	if len(attrs) != len(ruleCases)+1 {
		t.Errorf("found %d attributes, want %d", len(attrs), len(ruleCases)+1)
	}
}

// TestElixirOutdented checks the line reported for an outdented heredoc
// line: Elixir reported rules.ex:60 when compiling the fixture.
func TestElixirOutdented(t *testing.T) {
	attrs := scanFile(t, "testdata/rules.ex")
	if got := attrs["outdented"].Outdented; got != 60 {
		t.Errorf("outdented line = %d, want 60", got)
	}
	if got := attrs["indent"].Outdented; got != 0 {
		t.Errorf("@indent outdented line = %d, want none", got)
	}
	bodies, err := ElixirBodies([]string{"testdata/rules.ex"}, []Entry{{Name: "o", Attribute: "outdented", Read: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies[0].Warnings) != 1 {
		t.Errorf("warnings = %q, want one", bodies[0].Warnings)
	}
}

// TestElixirCRLF reads a heredoc with CRLF line ends. Expected value by
// hand: the CRLFs stay, a backslash before CRLF removes both, and the
// indentation is stripped. Elixir 1.14 printed "crlf\r\nnext\r\n" and the
// sha below for the same source.
func TestElixirCRLF(t *testing.T) {
	const want = "crlf\r\nnext\r\n"
	if sha1hex(want) != "cbadff62c69de73175373e77ffc579bc7e747451" {
		t.Fatalf("hand evaluation hashes to %s", sha1hex(want))
	}
	src := "defmodule C do\r\n  @c \"\"\"   \r\n  crlf\r\n  \\\r\n  next\r\n  \"\"\"\r\nend\r\n"
	attrs, err := ScanElixir([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(attrs) != 1 || string(attrs[0].Value) != want {
		t.Fatalf("attrs = %+v, want @c = %q", attrs, want)
	}
}
