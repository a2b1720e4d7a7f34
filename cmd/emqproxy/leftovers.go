package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/emqproxy/emqproxy/control/leftovers"
)

// Exit statuses of `queue leftovers`.
const (
	// 0: nothing left: none found, or every one removed
	leftoversFound = 2 // leftovers found and not removed (no --remove)
	// 1: an error, or leftovers --remove could not delete (each named)
)

// leftoverSample is how many keys of a leftover are printed without --list.
const leftoverSample = 3

// newLeftoversCmd is `emqproxy queue leftovers`: the keys of queues on
// nodes that do not own them (leftovers.Find), removed with --remove.
func newLeftoversCmd() *cobra.Command {
	var (
		path         string
		remove, list bool
	)
	cmd := &cobra.Command{
		Use:   "leftovers [--remove] --config FILE",
		Short: "List (and with --remove delete) the keys of queues on upstreams that do not own them",
		Long: "Scans every upstream's keys of queues (emq:{<queue>}:*) and lists, node by node, those of a queue " +
			"the node does not own: the owner is the merged control table's (a moved queue), else the " +
			"configuration's route. These are what moves leave behind: a source's copy kept by a move without " +
			"--delete-source, a copy on a target that a failed move could not delete. A queue with a move in " +
			"progress (its record on any upstream, or held), with an entry of the table that does not parse, or " +
			"whose owner is not an upstream of the configuration is never touched, and is listed as skipped. " +
			"Every upstream must be reachable: the entry that decides a queue's owner may be on that one alone.\n\n" +
			"--remove deletes the leftovers (UNLINK, in batches), after reading the tables and the move records " +
			"again for each queue. Run it when no move is being started.\n\n" +
			"Exit 0 when nothing is left (none found, or every one removed), 2 when leftovers are found and " +
			"not removed, 1 on an error or a removal that failed.\n\n" + configCredentialsHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, nodes, down, err := controlNodes(path)
			if err != nil {
				return err
			}
			defer closeNodes(nodes)
			scan, err := leftovers.Find(cmd.Context(), leftovers.Options{
				Nodes: nodes, Down: down, FileRoute: fileRoute(cfg), Remove: remove})
			if err != nil {
				return err
			}
			failed := printLeftovers(cmd.OutOrStdout(), scan, remove, list)
			switch {
			case failed > 0:
				return fmt.Errorf("%d leftover(s) not removed (above)", failed)
			case len(scan.Leftovers) > 0 && !remove:
				return exitCode(leftoversFound)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "the proxies' configuration file (YAML)")
	f.BoolVar(&remove, "remove", false, "delete the leftovers found")
	f.BoolVar(&list, "list", false, "print every leftover key (default: the first few of each queue)")
	return cmd
}

// printLeftovers prints a scan and returns how many leftovers could not be
// removed. The last line sums it up:
//
//	leftovers: <keys> keys of <n> queue(s) on <m> upstream(s), removed <r>, skipped <s> queue(s)
func printLeftovers(w io.Writer, s *leftovers.Scan, remove, list bool) (failed int) {
	nodes, queues := map[string]bool{}, map[string]bool{}
	for _, l := range s.Leftovers {
		nodes[l.Node], queues[l.Queue] = true, true
		where := "its route"
		if l.From == "table" {
			where = "the control table"
		}
		fmt.Fprintf(w, "%s: queue %s: %d keys (owner %s, by %s)\n", l.Node, l.Queue, len(l.Keys), l.Owner, where)
		shown := l.Keys
		if !list && len(shown) > leftoverSample {
			shown = shown[:leftoverSample]
		}
		for _, k := range shown {
			fmt.Fprintf(w, "  %s\n", k)
		}
		if more := len(l.Keys) - len(shown); more > 0 {
			fmt.Fprintf(w, "  ... and %d more (--list prints every key)\n", more)
		}
		if remove {
			if l.Err != nil {
				failed++
				fmt.Fprintf(w, "  removed %d; %v\n", l.Removed, l.Err)
			} else {
				fmt.Fprintf(w, "  removed %d\n", l.Removed)
			}
		}
	}
	skipped := map[string]bool{}
	for _, k := range s.Skipped {
		skipped[k.Queue] = true
		fmt.Fprintf(w, "skipped %s: queue %s: %d keys: %s\n", k.Node, k.Queue, k.Keys, k.Why)
	}
	fmt.Fprintf(w, "leftovers: %d keys of %d queue(s) on %d upstream(s), removed %d, skipped %d queue(s)",
		s.Keys(), len(queues), len(nodes), s.Removed(), len(skipped))
	if len(skipped) > 0 {
		fmt.Fprintf(w, " (%v)", slices.Sorted(maps.Keys(skipped)))
	}
	fmt.Fprintln(w)
	return failed
}
