package moduletest

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestBuildHasNoWarnings compiles the module as the stand does, with every
// warning an error: the normal build, and one build with every EMQ_BREAK_*
// branch switched on (each branch is compiled at least once).
func TestBuildHasNoWarnings(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("gcc not found: %v", err)
	}
	var broken []string
	for _, s := range shapes {
		broken = append(broken, "-DEMQ_BREAK_"+s.token)
	}
	for _, defs := range [][]string{nil, broken} {
		args := append([]string{"-O2", "-fPIC", "-shared", "-std=c99", "-Wall", "-Wextra", "-Werror"}, defs...)
		args = append(args, "-o", filepath.Join(t.TempDir(), "emq.so"), "emq.c")
		cmd := exec.Command("gcc", args...)
		cmd.Dir = node.ModuleDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("gcc %v: %v\n%s", args, err, out)
		}
	}
}
