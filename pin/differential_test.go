package pin

import (
	"encoding/base64"
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// diffPieces are the bits random literals are made of: text, raw new lines
// with and without indentation, every escape, quotes, braces, CRLF, and the
// escapes Elixir rejects.
var diffPieces = []string{
	"a", "b", " ", "  ", "\t", "\n", "\n", "\n  ", "\n    ", "\n\t", `\n`, `\t`, `\x41`, `\xfF`, `\u00e9`,
	`\u{1F600}`, `\\`, `\"`, `\#`, `\q`, `\s`, `\d`, `\0`, `\e`, "\\\n", "\\\n  ", `"`, `""`, `"""`, `\"""`,
	"#", "{", "}", `\#{x}`, "é", "\r\n", `\`, "|", "(", ")", `\|`, `\)`, "'", `\u{D800}`, `\u12`,
}

// randomLiteral returns a string literal in one of the forms the scanner
// reads, or "" when the literal would end before its last byte (the rest
// would be other code, which the comparison is not about).
func randomLiteral(r *rand.Rand) string {
	var body strings.Builder
	for k := r.Intn(12); k > 0; k-- {
		body.WriteString(diffPieces[r.Intn(len(diffPieces))])
	}
	b := body.String()
	var lit string
	switch ind := strings.Repeat(" ", r.Intn(5)); r.Intn(6) {
	case 0:
		lit = `"` + b + `"`
	case 1, 2:
		lit = `"""` + strings.Repeat(" ", r.Intn(2)) + "\n" + ind + b + "\n" + ind + `"""`
	case 3:
		lit = `~S"""` + "\n" + ind + b + "\n" + ind + `"""`
	case 4:
		lit = `~S|` + b + `|`
	default:
		lit = `~s(` + b + `)`
	}
	s := &scanner{src: []byte(lit), line: 1}
	if _, err := s.readLiteral(); err == nil && s.i != len(lit) {
		return ""
	}
	return lit
}

// TestDifferentialElixir evaluates thousands of random literals with the
// scanner and with Elixir, and requires the same SHA-1 (or both refusing).
// The only difference allowed is by design: the scanner refuses any
// interpolation, which Elixir evaluates. It needs elixir on PATH (Debian:
// apt-get install elixir) and is skipped without it.
func TestDifferentialElixir(t *testing.T) {
	elixir, err := exec.LookPath("elixir")
	if err != nil {
		t.Skip("elixir is not installed; the checked-in shas of rules_test.go stand in for it")
	}
	if testing.Short() {
		t.Skip("-short: not starting elixir")
	}
	r := rand.New(rand.NewSource(1))
	var lits, lines []string
	for len(lits) < 3000 {
		lit := randomLiteral(r)
		if lit == "" {
			continue
		}
		lits = append(lits, lit)
		lines = append(lines, base64.StdEncoding.EncodeToString([]byte(lit)))
	}
	dir := t.TempDir()
	cases := filepath.Join(dir, "cases.txt")
	if err := os.WriteFile(cases, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
File.stream!(System.argv() |> hd())
|> Enum.each(fn line ->
  src = line |> String.trim_trailing("\n") |> Base.decode64!()
  out =
    try do
      case Code.eval_string(src) do
        {v, _} when is_binary(v) -> :crypto.hash(:sha, v) |> Base.encode16(case: :lower)
        _ -> "refused"
      end
    rescue
      _ -> "refused"
    end
  IO.puts(out)
end)
`
	exs := filepath.Join(dir, "eval.exs")
	if err := os.WriteFile(exs, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(elixir, exs, cases).Output()
	if err != nil {
		t.Fatalf("elixir: %v", err)
	}
	theirs := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(theirs) != len(lits) {
		t.Fatalf("elixir answered %d of %d", len(theirs), len(lits))
	}
	agreed, values := 0, 0
	for i, lit := range lits {
		mine := "refused"
		var why error
		attrs, err := ScanElixir([]byte("@a " + lit + "\n"))
		switch {
		case err != nil:
			why = err
		case len(attrs) != 1:
			t.Fatalf("%q: %d attributes", lit, len(attrs))
		case attrs[0].Err != nil:
			why = attrs[0].Err
		default:
			mine = sha1hex(string(attrs[0].Value))
		}
		if mine == theirs[i] {
			agreed++
			if mine != "refused" {
				values++
			}
			continue
		}
		if errors.Is(why, ErrNotFixed) && strings.Contains(why.Error(), "interpolation") {
			continue // refused by design
		}
		t.Errorf("%q: scanner %s (%v), elixir %s", lit, mine, why, theirs[i])
	}
	t.Logf("%d literals, %d agreed (%d of them values)", len(lits), agreed, values)
}
