package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/verify"
)

func init() { extraCommands = append(extraCommands, newFenceCmd, newVerifyCmd) }

// nodeAuth are the credentials flags of the commands that talk to one node.
type nodeAuth struct{ user, pass string }

func (a *nodeAuth) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.user, "user", "", "ACL user name")
	cmd.Flags().StringVar(&a.pass, "password", "", "password (or EMQPROXY_NODE_PASSWORD)")
}

func (a *nodeAuth) password() string {
	if a.pass != "" {
		return a.pass
	}
	return lookupEnv("EMQPROXY_NODE_PASSWORD")
}

func newFenceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fence",
		Short: "Inspect or brand a node's {emq}:version",
		Long: "Exit codes: 0 the node is a module node that passes the wire-6 fence " +
			"(check) or was branded (install); 1 any other node, or the install was refused; " +
			"2 the node could not be reached.",
	}
	var ca, ia nodeAuth
	check := &cobra.Command{
		Use:   "check ADDR",
		Short: "Run the wire-6 fence against a node and print what it is; writes nothing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := fence.RunCheck(cmd.Context(), cmd.OutOrStdout(), args[0], ca.user, ca.password()); code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	ca.register(check)
	install := &cobra.Command{
		Use:   "install ADDR",
		Short: "Brand a module node: EMQ.INSTALL 1 {emq}:version",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := fence.RunInstall(cmd.Context(), cmd.OutOrStdout(), args[0], ia.user, ia.password()); code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	ia.register(install)
	cmd.AddCommand(check, install)
	return cmd
}

func newVerifyCmd() *cobra.Command {
	var (
		a       nodeAuth
		scratch string
		mapPath string
		bodies  string
		force   bool
	)
	cmd := &cobra.Command{
		Use:   "verify --scratch ADDR --map FILE --bodies DIR",
		Short: "Run the differential harness (scripts vs module) against a scratch module node",
		Long: "Runs every pinned script body with EVAL and its EMQ.* verb with the same tail on two " +
			"fresh queues of a scratch module node, and compares replies and keys. It refuses a node " +
			"whose keyspace holds anything but {emq}:version unless --force. Exit 1 when any case differs.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := shamap.Load(mapPath)
			if err != nil {
				return err
			}
			rep, err := verify.Run(cmd.Context(), verify.Config{
				Addr: scratch, Username: a.user, Password: a.password(),
				Map: m, BodiesDir: bodies, Force: force, Out: cmd.OutOrStdout(),
			})
			if err != nil {
				return err
			}
			if !rep.OK() {
				return exitCode(1)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "verify: every case equal")
			return nil
		},
	}
	a.register(cmd)
	f := cmd.Flags()
	f.StringVar(&scratch, "scratch", "", "scratch module node, host:port (required)")
	f.StringVar(&mapPath, "map", "stand/map.yaml", "pinned map")
	f.StringVar(&bodies, "bodies", "stand/scripts", "folder of <name>.lua bodies")
	f.BoolVar(&force, "force", false, "run even when the node's keyspace is not empty")
	_ = cmd.MarkFlagRequired("scratch")
	return cmd
}
