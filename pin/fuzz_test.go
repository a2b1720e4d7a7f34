package pin

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzElixir feeds arbitrary bytes to the scanner, which must never panic
// and must give the same answer twice. The same bytes, taken as a script
// body, must come back unchanged from an indented heredoc and from a plain
// string written the way the stand fixtures are.
func FuzzElixir(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.ex")
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		a1, err1 := ScanElixir(src)
		a2, err2 := ScanElixir(src)
		if (err1 == nil) != (err2 == nil) || len(a1) != len(a2) {
			t.Fatalf("two scans differ: %v, %v", err1, err2)
		}
		if err1 != nil && !errors.Is(err1, ErrSyntax) {
			t.Fatalf("error %v does not wrap ErrSyntax", err1)
		}
		for i := range a1 {
			if a1[i].Name != a2[i].Name || !bytes.Equal(a1[i].Value, a2[i].Value) {
				t.Fatalf("two scans differ at attribute %d", i)
			}
			if a1[i].Err != nil && a1[i].Value != nil {
				t.Fatalf("@%s has both a value and an error", a1[i].Name)
			}
		}

		body := string(src)
		if !utf8.ValidString(body) || strings.ContainsFunc(body, isBidi) {
			return // not something Elixir source can hold raw
		}
		for _, form := range []string{heredocAttr("body", body), plainAttr("body", body)} {
			attrs, err := ScanElixir([]byte("defmodule F do\n" + form + "end\n"))
			if err != nil {
				t.Fatalf("%q: %v", form, err)
			}
			if len(attrs) != 1 || attrs[0].Err != nil {
				t.Fatalf("%q: attributes %+v", form, attrs)
			}
			if string(attrs[0].Value) != body {
				t.Fatalf("%q evaluates to %q, want %q", form, attrs[0].Value, body)
			}
		}
	})
}

func isBidi(r rune) bool { return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069) }

// TestScanLinear scans inputs that a quadratic scanner would take hours
// on: a 4 MiB line of "@" and a string of a million escapes.
func TestScanLinear(t *testing.T) {
	attrs, err := ScanElixir(bytes.Repeat([]byte("@"), 4<<20))
	if err != nil || len(attrs) != 0 {
		t.Fatalf("%d attributes, %v", len(attrs), err)
	}
	src := "@a \"" + strings.Repeat(`\n`, 1<<20) + "\"\n"
	attrs, err = ScanElixir([]byte(src))
	if err != nil || len(attrs) != 1 || len(attrs[0].Value) != 1<<20 {
		t.Fatalf("attributes %d, %v", len(attrs), err)
	}
}

// TestEscapeErrorLine checks the line an escape error names.
func TestEscapeErrorLine(t *testing.T) {
	src := "defmodule M do\n  @a \"\"\"\n    ok\n    \\xZZ\n    \"\"\"\n  @b \"ok\n\\u{D800}\"\nend\n"
	attrs, err := ScanElixir([]byte(src))
	if err != nil || len(attrs) != 2 {
		t.Fatalf("attributes %+v, %v", attrs, err)
	}
	if !strings.Contains(attrs[0].Err.Error(), "line 4:") || !strings.Contains(attrs[1].Err.Error(), "line 7:") {
		t.Errorf("errors %v; %v: want lines 4 and 7", attrs[0].Err, attrs[1].Err)
	}
}
