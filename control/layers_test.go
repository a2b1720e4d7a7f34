package control

import (
	"go/build"
	"os"
	"slices"
	"strings"
	"testing"
)

// layers are a move's packages, highest first, as doc.go lists them: each
// may import only those after it.
var layers = []string{"control", "keycopy", "tail", "table"}

// beside are the packages under control/ outside the layers, with the
// only packages under control/ each may import.
var beside = map[string][]string{
	"leftovers":            {"table"},
	"internal/controltest": {"table"},
}

// TestLayers fails when a package of a move imports one above it in
// doc.go's list, when a package beside them imports more than its share
// (control/leftovers only the table), or when a package under control/ is
// in neither list.
func TestLayers(t *testing.T) {
	const mod = "github.com/emqproxy/emqproxy/control"
	deps := func(dir string) []string {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		var out []string
		for _, imp := range pkg.Imports {
			if imp == mod {
				out = append(out, "control")
			} else if rest, ok := strings.CutPrefix(imp, mod+"/"); ok {
				out = append(out, rest)
			}
		}
		return out
	}
	for i, name := range layers {
		dir := "."
		if name != "control" {
			dir = name
		}
		for _, dep := range deps(dir) {
			switch j := slices.Index(layers, dep); {
			case j < 0:
				t.Errorf("%s imports %s, which doc.go does not list", name, dep)
			case j <= i:
				t.Errorf("%s imports %s, which doc.go lists above it", name, dep)
			}
		}
	}
	for name, allowed := range beside {
		for _, dep := range deps(name) {
			if !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s: it may import only %s under control/", name, dep, strings.Join(allowed, ", "))
			}
		}
	}
	var walk func(dir string)
	walk = func(dir string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			name := strings.TrimPrefix(dir+"/"+e.Name(), "./")
			if _, err := build.ImportDir(name, 0); err == nil && !slices.Contains(layers, name) && beside[name] == nil {
				t.Errorf("package control/%s is in neither doc.go's list nor TestLayers' packages beside it", name)
			}
			walk(name)
		}
	}
	walk(".")
}

// TestProxyReadsOnlyTheTable fails when the proxy imports a package under
// control/ other than the table: it reads tables, never moves.
func TestProxyReadsOnlyTheTable(t *testing.T) {
	const mod = "github.com/emqproxy/emqproxy/"
	pkg, err := build.ImportDir("../proxy", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, mod+"control") && imp != mod+"control/table" {
			t.Errorf("proxy imports %s: only control/table", strings.TrimPrefix(imp, mod))
		}
	}
}
