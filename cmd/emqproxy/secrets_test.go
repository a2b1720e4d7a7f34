package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/stand/node"
)

// secretFlag matches a flag name that would take a secret as its value;
// a flag naming a file that holds one (-file) is what the tools offer.
var secretFlag = regexp.MustCompile(`(?i)(pass|secret|token|auth)`)

// TestNoSecretIsAnArgument walks every command of the binary: no flag
// takes a secret (ps shows every argument to every user of the host), a
// --password given anyway is refused before anything is sent, and the
// help of every command that needs credentials says where they come from.
func TestNoSecretIsAnArgument(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if secretFlag.MatchString(f.Name) && !strings.HasSuffix(f.Name, "-file") && !f.Hidden {
				t.Errorf("%s --%s takes a secret as an argument", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	node.EachServer(t, testNodePasswordNotAnArgument)
}

// testNodePasswordNotAnArgument runs the node commands against a node
// that requires a password.
func testNodePasswordNotAnArgument(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Role: node.Module, Password: "s3cret", Server: srv.Path})
	for _, c := range []struct{ cmd, args []string }{
		{[]string{"fence", "check"}, []string{n.Addr}},
		{[]string{"fence", "install"}, []string{n.Addr}},
		{[]string{"verify"}, []string{"--scratch", n.Addr}},
	} {
		cmd := strings.Join(c.cmd, " ")
		args := append(append(append([]string(nil), c.cmd...), c.args...), "--password", "s3cret")
		_, _, err := runCmd(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--password is not accepted") || !strings.Contains(err.Error(), config.NodePasswordVariable) {
			t.Errorf("%s --password: %v", cmd, err)
		}
		help, _, err := runCmd(t, append(append([]string(nil), c.cmd...), "--help")...)
		if err != nil || !strings.Contains(help, "--password-file") || !strings.Contains(help, config.NodePasswordVariable) ||
			!strings.Contains(help, "never an argument") {
			t.Errorf("%s --help does not say where the password comes from (%v):\n%s", cmd, err, help)
		}
	}
	for _, args := range [][]string{{"queue", "move"}, {"queue", "status"}} {
		help, _, err := runCmd(t, append(args, "--help")...)
		if err != nil || !strings.Contains(help, "never an argument") || !strings.Contains(help, "--config") {
			t.Errorf("%s --help does not say where the credentials come from (%v):\n%s", strings.Join(args, " "), err, help)
		}
	}

	// The node requires the password: it is taken from the environment or
	// from a file, never from an argument.
	if out, _, err := runCmd(t, "fence", "check", n.Addr); err == nil {
		t.Fatalf("fence check without the password passed:\n%s", out)
	}
	t.Setenv(config.NodePasswordVariable, "s3cret")
	if out, _, err := runCmd(t, "fence", "check", n.Addr); err != nil {
		t.Errorf("fence check with %s: %v\n%s", config.NodePasswordVariable, err, out)
	}
	t.Setenv(config.NodePasswordVariable, "")
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCmd(t, "fence", "check", "--password-file", file, n.Addr); err != nil {
		t.Errorf("fence check --password-file: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "fence", "check", "--password-file", file+".absent", n.Addr); err == nil ||
		!strings.Contains(err.Error(), "--password-file") {
		t.Errorf("fence check with an absent --password-file: %v", err)
	}
}
