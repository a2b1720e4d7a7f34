package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
)

// runCmd runs the binary's root command with args, returning its output
// and error as main would see them.
func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestMapPinAndVerify(t *testing.T) {
	const scripts, standMap = "../../stand/scripts", "../../stand/map.yaml"
	dir := t.TempDir()
	out := filepath.Join(dir, "map.yaml")

	if _, _, err := runCmd(t, "map", "pin", "--lua", scripts, "--source", "stand/scripts", "--out", out); err != nil {
		t.Fatal(err)
	}
	got, err := shamap.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := shamap.Load(standMap)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Scripts) != len(want.Scripts) || got.Source != want.Source || got.LegacyBrand != want.LegacyBrand {
		t.Fatalf("pinned %+v, want %+v", got, want)
	}
	for i, s := range want.Scripts {
		if *got.Scripts[i] != *s {
			t.Errorf("script %d = %+v, want %+v", i, *got.Scripts[i], *s)
		}
	}

	// The Elixir fixture, files given as arguments after --elixir, pins the same.
	stdout, _, err := runCmd(t, "map", "pin", "--elixir", "../../pin/testdata/stand_scripts.ex", "--source", "stand/scripts")
	if err != nil {
		t.Fatal(err)
	}
	fromElixir, err := shamap.Parse([]byte(stdout))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range want.Scripts {
		if fromElixir.Scripts[i].SHA != s.SHA {
			t.Errorf("elixir %s = %s, want %s", s.Name, fromElixir.Scripts[i].SHA, s.SHA)
		}
	}

	stdout, _, err = runCmd(t, "map", "verify", "--map", standMap, "--lua", scripts)
	if err != nil || !strings.Contains(stdout, "all 14 pins match") {
		t.Fatalf("verify: %q, %v", stdout, err)
	}

	// One body changed in a copy of the folder: verify prints that script
	// and only it, and exits 1.
	copyDir := filepath.Join(dir, "scripts")
	if err := os.Mkdir(copyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range want.Scripts {
		body, err := os.ReadFile(filepath.Join(scripts, s.Name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		if s.Name == "fail" {
			body = append(body, '\n')
		}
		if err := os.WriteFile(filepath.Join(copyDir, s.Name+".lua"), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stdout, _, err = runCmd(t, "map", "verify", "--map", standMap, "--lua", copyDir)
	var code exitCode
	if !errors.As(err, &code) || code != 1 {
		t.Fatalf("verify with a changed body: err %v, want exit status 1", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "fail ") ||
		!strings.Contains(lines[1], want.Scripts[4].SHA) || !strings.Contains(lines[2], "1 mismatch") {
		t.Errorf("verify output:\n%s", stdout)
	}
}

func TestMapPinRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"map", "pin"},
		{"map", "pin", "--lua", "x", "--elixir", "y.ex"},
		{"map", "pin", "--elixir", "../../pin/testdata/refused.ex", "--spec", "../../pin/testdata/refused_spec.yaml"},
		{"map", "verify", "--lua", "../../stand/scripts"},
	} {
		if _, _, err := runCmd(t, args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	_, _, err := runCmd(t, "map", "pin", "--elixir", "../../pin/testdata/refused.ex", "--spec", "../../pin/testdata/refused_spec.yaml")
	if err == nil || !strings.Contains(err.Error(), "refused.ex:6 @interp") || !strings.Contains(err.Error(), "interpolation") {
		t.Errorf("interpolated attribute: %v", err)
	}
}
