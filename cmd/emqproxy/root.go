package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitCode is returned by commands whose exit status carries meaning for
// scripts (fence check, map verify); main exits with it without printing.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func asExitCode(err error, out *exitCode) bool { return errors.As(err, out) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "emqproxy",
		Short:         "Run legacy EchoMQ clients on the native job-core module",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCmd(), newConfigCmd(), newVersionCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}

// extraCommands are the operator tools registered by their own files.
var extraCommands []func() *cobra.Command

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v := version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			fmt.Fprintf(cmd.OutOrStdout(), "emqproxy %s\n", v)
		},
	}
}

func lookupEnv(key string) string { return os.Getenv(key) }
