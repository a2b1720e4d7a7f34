package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/verify"
)

func init() { extraCommands = append(extraCommands, newFenceCmd, newVerifyCmd) }

// nodeAuth are the credentials of the commands that talk to one node. The
// password is never taken from an argument, which every user of the host
// sees in ps: it comes from a file (--password-file) or from
// EMQPROXY_NODE_PASSWORD. A --password given anyway is refused before
// anything is sent.
type nodeAuth struct {
	user     string
	passFile string
	pass     string // loaded by load
}

// credentialsHelp is what the help of every command with nodeAuth says.
const credentialsHelp = "Credentials: --user, and the password from --password-file or " +
	config.NodePasswordVariable + "; never an argument (ps shows every argument to every user of the host)."

func (a *nodeAuth) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.user, "user", "", "ACL user name")
	f.StringVar(&a.passFile, "password-file", "", "a file holding the password (one trailing line break is ignored); without it, "+config.NodePasswordVariable)
	// Registered only to refuse it with the reason.
	f.String("password", "", "")
	_ = f.MarkHidden("password")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error { return a.load(cmd) }
}

// load refuses a --password argument and reads the password from
// --password-file, else from the environment.
func (a *nodeAuth) load(cmd *cobra.Command) error {
	if cmd.Flags().Changed("password") {
		return fmt.Errorf("--password is not accepted: ps shows every argument to every user of the host; "+
			"put the password in %s or in a file named by --password-file", config.NodePasswordVariable)
	}
	if a.passFile == "" {
		a.pass = lookupEnv(config.NodePasswordVariable)
		return nil
	}
	b, err := os.ReadFile(a.passFile)
	if err != nil {
		return fmt.Errorf("--password-file: %w", err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	a.pass = strings.TrimSuffix(s, "\r")
	return nil
}

// password is the password load found ("" for none).
func (a *nodeAuth) password() string { return a.pass }

func newFenceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fence",
		Short: "Inspect or brand a node's {emq}:version",
		Long: "Exit codes: 0 the node is a module node that passes the wire-6 fence " +
			"(check) or was branded (install); 1 any other node, or the install was refused; " +
			"2 the node could not be reached.\n\n" + credentialsHelp,
	}
	var ca, ia nodeAuth
	check := &cobra.Command{
		Use:   "check ADDR",
		Short: "Run the wire-6 fence against a node and print what it is; writes nothing",
		Long: "Run the wire-6 fence against a node and print what it is; writes nothing. Exit codes: 0 a module " +
			"node that passes the fence, 1 any other node, 2 the node could not be reached.\n\n" + credentialsHelp,
		Args: cobra.ExactArgs(1),
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
		Long: "Brand a module node: EMQ.INSTALL 1 {emq}:version. Exit codes: 0 branded, 1 the install was refused, " +
			"2 the node could not be reached.\n\n" + credentialsHelp,
		Args: cobra.ExactArgs(1),
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
		replay  string
		scripts string
		module  string
	)
	cmd := &cobra.Command{
		Use:   "verify (--scratch ADDR | --replay DIR_OR_FILE --scripts ADDR --module ADDR) --map FILE --bodies DIR",
		Short: "Hold a module build to the scripts: the differential harness, or a replay of captured traffic",
		Long: "With --scratch: runs every pinned script body with EVAL and its EMQ.* verb with the same tail on two " +
			"fresh queues of a scratch module node, and compares replies and keys. It refuses a node " +
			"whose keyspace holds anything but {emq}:version unless --force. Exit 1 when any case differs.\n\n" +
			"With --replay: runs a capture's calls (capture.* keys of the proxy) in their recorded order, queue by " +
			"queue, as EVALSHA on the scripts node and as EMQ.<TOKEN> on the module node, and compares every reply " +
			"and each queue's keys by the contract, and each reply with production's. Both nodes must be empty " +
			"scratch nodes. Exit 1 when the nodes differ; exit 2, with nothing sent, on a corrupt, foreign or " +
			"unknown-version capture, a sha the map does not pin, a capture without calls, or unfit nodes.\n\n" + credentialsHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replay != "" {
				return runReplay(cmd, verify.ReplayConfig{
					Capture: replay, Scripts: scripts, Module: module,
					Username: a.user, Password: a.password(), BodiesDir: bodies, Out: cmd.OutOrStdout(),
				}, mapPath)
			}
			if scratch == "" {
				return fmt.Errorf("verify: --scratch ADDR or --replay DIR_OR_FILE is required")
			}
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
	f.StringVar(&scratch, "scratch", "", "scratch module node, host:port (the differential harness)")
	f.StringVar(&replay, "replay", "", "a capture file or directory to replay")
	f.StringVar(&scripts, "scripts", "", "with --replay: the scratch scripts node, host:port")
	f.StringVar(&module, "module", "", "with --replay: the scratch module node, host:port")
	f.StringVar(&mapPath, "map", "stand/map.yaml", "pinned map")
	f.StringVar(&bodies, "bodies", "stand/scripts", "folder of <name>.lua bodies")
	f.BoolVar(&force, "force", false, "run even when the node's keyspace is not empty (--scratch only)")
	cmd.MarkFlagsMutuallyExclusive("scratch", "replay")
	return cmd
}

// runReplay is `verify --replay`: exit 2 when nothing could be measured,
// 1 when the nodes differ.
func runReplay(cmd *cobra.Command, cfg verify.ReplayConfig, mapPath string) error {
	fail := func(err error) error {
		fmt.Fprintln(cmd.ErrOrStderr(), "emqproxy: verify --replay:", err)
		return exitCode(2)
	}
	m, err := shamap.Load(mapPath)
	if err != nil {
		return fail(err)
	}
	cfg.Map = m
	rep, err := verify.Replay(cmd.Context(), cfg)
	if err != nil {
		if errors.Is(err, verify.ErrServer) && rep.ModuleNode != "" {
			fmt.Fprint(cmd.OutOrStdout(), rep.String())
		}
		return fail(err)
	}
	if !rep.OK() {
		return exitCode(1)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "verify: every call equal")
	return nil
}
