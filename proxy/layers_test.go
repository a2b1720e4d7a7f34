package proxy

import (
	"go/build"
	"os"
	"slices"
	"strings"
	"testing"
)

// layers are the data path's packages, highest first, as doc.go lists
// them: each may import only those after it.
var layers = []string{"proxy", "session", "segment", "txn", "conn", "clients", "tracking", "pubsub", "plan",
	"upstream", "pipe", "observe", "limits", "cmdtable", "deadline", "clienterr"}

// TestLayers fails when a package of the data path imports one above it
// in doc.go's list, or when a package under proxy/ is missing from it.
func TestLayers(t *testing.T) {
	const mod = "github.com/emqproxy/emqproxy/proxy"
	for i, name := range layers {
		dir := "."
		if name != "proxy" {
			dir = name
		}
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			if !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, mod+"/")
			j := slices.Index(layers, dep)
			switch {
			case j < 0:
				t.Errorf("%s imports %s, which doc.go does not list", name, dep)
			case j <= i:
				t.Errorf("%s imports %s, which doc.go lists above it", name, dep)
			}
		}
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || slices.Contains(layers, e.Name()) {
			continue
		}
		if _, err := build.ImportDir(e.Name(), 0); err == nil {
			t.Errorf("package proxy/%s is not in doc.go's list of the data path's packages", e.Name())
		}
	}
}
