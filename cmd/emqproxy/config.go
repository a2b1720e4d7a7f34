package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/shamap"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Configuration tools"}
	var path string
	check := &cobra.Command{
		Use:   "check",
		Short: "Validate a configuration file and the map it names",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := config.Load(path, nil)
			if err != nil {
				return err
			}
			if _, err := c.AdminToken(); err != nil {
				return err
			}
			m, err := shamap.Load(c.Map)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "config ok: %d upstream(s), %d route(s), map %s (%d scripts, digest %s)\n",
				len(c.Upstreams), len(c.Routes), c.Map, len(m.Scripts), m.Digest)
			return nil
		},
	}
	check.Flags().StringVar(&path, "config", "", "configuration file (YAML)")
	cmd.AddCommand(check)
	return cmd
}
