package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/emqproxy/emqproxy/pin"
	"github.com/emqproxy/emqproxy/shamap"
)

func init() { extraCommands = append(extraCommands, newMapCmd) }

func newMapCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "map", Short: "Pin and verify the script map"}
	cmd.AddCommand(newMapPinCmd(), newMapVerifyCmd())
	return cmd
}

// bodyFlags are the flags that say where the script bodies are.
type bodyFlags struct {
	lua    string
	elixir []string
	spec   string
}

func (f *bodyFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.lua, "lua", "", "folder of <name>.lua bodies")
	cmd.Flags().StringSliceVar(&f.elixir, "elixir", nil, "Elixir source files holding the bodies as module attributes (more files may follow as arguments)")
	cmd.Flags().StringVar(&f.spec, "spec", "", "spec file (YAML): name, attribute, verb or read, keys, values of each script")
}

// files returns the Elixir files from --elixir and the arguments.
func (f *bodyFlags) files(args []string) ([]string, error) {
	switch {
	case f.lua != "" && len(f.elixir) > 0:
		return nil, errors.New("give either --lua or --elixir, not both")
	case f.lua == "" && len(f.elixir) == 0:
		return nil, errors.New("give --lua DIR, or --elixir and the Elixir files")
	case f.lua != "" && len(args) > 0:
		return nil, fmt.Errorf("unexpected arguments %q with --lua", args)
	}
	return append(append([]string(nil), f.elixir...), args...), nil
}

// bodies reads the bodies of spec; strict refuses .lua files spec does not name.
func (f *bodyFlags) bodies(files []string, spec []pin.Entry, strict bool) ([]pin.Body, error) {
	if f.lua != "" {
		return pin.LuaBodies(f.lua, spec, strict)
	}
	return pin.ElixirBodies(files, spec)
}

func newMapPinCmd() *cobra.Command {
	var (
		bf                 bodyFlags
		brand, source, out string
	)
	cmd := &cobra.Command{
		Use:   "pin (--lua DIR | --elixir FILE...) [--spec FILE] [--brand B] [--source S] [--out FILE]",
		Short: "Compute the pinned map from .lua bodies or Elixir sources",
		Long: "Compute the pinned map: the SHA-1 of each script body with the kind and shape the\n" +
			"spec gives it. Bodies come from a folder of <name>.lua files, or from Elixir\n" +
			"module attributes (@name \"\"\"...\"\"\"), evaluated by Elixir's rules for string\n" +
			"literals. Without --spec, the spec of the legacy wire-4 release is used.",
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := bf.files(args)
			if err != nil {
				return err
			}
			spec := pin.DefaultSpec()
			if bf.spec != "" {
				if spec, err = pin.LoadSpec(bf.spec); err != nil {
					return err
				}
			}
			bodies, err := bf.bodies(files, spec, true)
			if err != nil {
				return err
			}
			for _, b := range bodies {
				for _, w := range b.Warnings {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
				}
			}
			if source == "" {
				source = bf.lua
				if source == "" {
					source = strings.Join(files, ",")
				}
			}
			_, text, err := pin.Build(bodies, brand, source)
			if err != nil {
				return err
			}
			if out == "" {
				_, err = cmd.OutOrStdout().Write(text)
				return err
			}
			if err := writeFileAtomic(out, text); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "pinned %d scripts to %s\n", len(bodies), out)
			return nil
		},
	}
	bf.register(cmd)
	cmd.Flags().StringVar(&brand, "brand", pin.DefaultBrand, "legacy brand recorded in the map")
	cmd.Flags().StringVar(&source, "source", "", "where the bodies came from, recorded in the map (e.g. a commit); default the --lua folder or the Elixir files")
	cmd.Flags().StringVar(&out, "out", "", "write the map to FILE instead of standard output")
	return cmd
}

func newMapVerifyCmd() *cobra.Command {
	var (
		bf      bodyFlags
		mapPath string
	)
	cmd := &cobra.Command{
		Use:   "verify --map FILE (--lua DIR | --elixir FILE...) [--spec FILE]",
		Short: "Recompute every pin of a map from its bodies and report the differences",
		Long: "Recompute every pin of the map from the bodies and compare. Exits 0 with a\n" +
			"one-line summary when all match, 1 with a table of mismatches otherwise.\n" +
			"Without --spec, each script's attribute is named like the script, and only\n" +
			"the shas are compared; with --spec, kinds and shapes are compared too.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if mapPath == "" {
				return errors.New("give --map FILE")
			}
			files, err := bf.files(args)
			if err != nil {
				return err
			}
			m, err := shamap.Load(mapPath)
			if err != nil {
				return err
			}
			spec := pin.SpecOf(m)
			if bf.spec != "" {
				if spec, err = pin.LoadSpec(bf.spec); err != nil {
					return err
				}
			}
			bodies, err := bf.bodies(files, spec, false)
			if err != nil {
				return err
			}
			bad := pin.Verify(m, bodies)
			if len(bad) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "map %s: all %d pins match (digest %s)\n", mapPath, len(m.Scripts), m.Digest)
				return nil
			}
			writeMismatches(cmd.OutOrStdout(), bad)
			fmt.Fprintf(cmd.OutOrStdout(), "map %s: %d mismatch(es) in %d pins\n", mapPath, len(bad), len(m.Scripts))
			return exitCode(1)
		},
	}
	bf.register(cmd)
	cmd.Flags().StringVar(&mapPath, "map", "", "the pinned map to verify")
	return cmd
}

// writeMismatches prints the mismatch table: name, pinned, actual, note.
func writeMismatches(w io.Writer, bad []shamap.Mismatch) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPINNED\tACTUAL\tNOTE")
	for _, b := range bad {
		pinned, actual, note := b.Pinned, b.Actual, ""
		if pinned == "" {
			pinned = "-"
		}
		if actual == "" {
			actual = "-"
		}
		if b.Err != nil {
			note = b.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Name, pinned, actual, note)
	}
	tw.Flush()
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it over path, so a reader never sees half a map.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
