package moduletest

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestBuildHasNoWarnings compiles the module as the stand does, with every
// warning an error, for the normal build and each test build.
func TestBuildHasNoWarnings(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("gcc not found: %v", err)
	}
	defs := []string{""}
	if !testing.Short() {
		for _, s := range shapes {
			defs = append(defs, "-DEMQ_BREAK_"+s.token)
		}
	}
	for _, d := range defs {
		args := []string{"-O2", "-fPIC", "-shared", "-std=c99", "-Wall", "-Wextra", "-Werror"}
		if d != "" {
			args = append(args, d)
		}
		args = append(args, "-o", filepath.Join(t.TempDir(), "emq.so"), "emq.c")
		cmd := exec.Command("gcc", args...)
		cmd.Dir = node.ModuleDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("gcc %v: %v\n%s", args, err, out)
		}
	}
}
