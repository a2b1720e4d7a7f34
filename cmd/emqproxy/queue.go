package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/control"
	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/shamap"
)

func init() { extraCommands = append(extraCommands, newQueueCmd) }

// configCredentialsHelp says where the queue commands find the nodes'
// credentials.
const configCredentialsHelp = "Credentials: the upstreams' (and sentinels') usernames, passwords and TLS of the " +
	"configuration the proxies use (--config), or its EMQPROXY_<KEY> variables " +
	"(EMQPROXY_UPSTREAMS_<NAME>_PASSWORD); never an argument (ps shows every argument to every user of the host)."

// The mover's garbage collector. A copy allocates fast over a small live
// heap: every row read is a reply and every row written a command, about
// 10 MiB live while rows are copied (sorted sets gathered for their sorted
// write add at most keycopy's bound, 32 MiB each). Go's default (GOGC 100)
// then collects every 10 MiB or so, over a hundred times in a 1M-job move;
// at 400 it collects about a quarter as often. Measured on the move bench
// (1M jobs, --rate 0, 2 cores, alternated runs): 17.5 to 21.4 s (median
// 19.0 s) against 20.1 to 25.5 s (median 21.2 s). The soft memory limit
// keeps the heap within bounds a host beside its nodes can spare when sets
// are gathered: below it the percent rules, near it the collector runs
// sooner.
const (
	moverGCPercent = 400
	moverMemLimit  = 384 << 20
)

// moverGC sets the mover's garbage collector (above), unless the operator
// set it: GOGC or GOMEMLIMIT in the environment win.
func moverGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(moverGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(moverMemLimit)
	}
}

// newQueueCmd is `emqproxy queue`: moving a queue between the upstreams of
// a configuration with every proxy running (package control), and the
// control table's status.
func newQueueCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Move queues between upstreams online; show the control table"}
	var (
		path, to, stopAfter, pauseAfter, rate, track   string
		resume, abort, replace, deleteSource, holdCopy bool
		wait, maxHold, deadline, replicaWait           time.Duration
	)
	move := &cobra.Command{
		Use:   "move QUEUE --to UPSTREAM --config FILE",
		Short: "Move a queue, with its jobs, to another upstream while every proxy keeps serving",
		Long: "Copies every key under the queue's hashtag to the target while the queue is served, " +
			"tracking what changes on the source (its replication stream, or keyspace notifications where it refuses " +
			"that: --track) and copying it again " +
			"in rounds; then holds the queue on its node (every proxy acknowledges, or its lease expires), " +
			"copies and verifies what changed last, and gives the queue to the target on both nodes; the " +
			"proxies release the held commands to the target. Large keys are copied in chunks. The proxies " +
			"must run with control.enabled. --resume completes a move that was stopped; --abort rolls one " +
			"back before its flip. Exit 1 on any refusal or failure, with the reason.\n\n" + configCredentialsHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if resume && abort {
				return fmt.Errorf("--resume and --abort exclude each other")
			}
			if !resume && !abort && to == "" {
				return fmt.Errorf("--to UPSTREAM is required to start a move")
			}
			cfg, nodes, down, err := controlNodes(path)
			if err != nil {
				return err
			}
			defer closeNodes(nodes)
			if !cfg.Control.Enabled {
				return fmt.Errorf("control.enabled is false in %s: proxies running it would not see the move (turn it on in every proxy first)", path)
			}
			m, err := shamap.Load(cfg.Map)
			if err != nil {
				return err
			}
			if wait == 0 {
				wait = 2*cfg.Control.Lease + cfg.Timeouts.Hold
			}
			if maxHold == 0 {
				maxHold = cfg.Timeouts.Hold / 2
			}
			bps, err := keycopy.ParseRate(rate)
			if err != nil {
				return err
			}
			tracking, err := tail.ParseTrack(track)
			if err != nil {
				return err
			}
			mv := &control.Mover{
				Queue: args[0], To: to, Nodes: nodes, Down: down, FileRoute: fileRoute(cfg),
				CheckTarget: func(ctx context.Context, n *table.Node) error { return checkRole(ctx, cfg, m, n) },
				Replace:     replace, DeleteSource: deleteSource, Wait: wait, StopAfter: stopAfter, Out: cmd.OutOrStdout(),
				HoldCopy: holdCopy, Rate: bps, MaxHold: maxHold, Track: tracking,
				ReplicaWait: min(replicaWait, deadline),
			}
			mv.Until = time.Now().Add(deadline) // retryUntil's end too
			if pauseAfter != "" {
				// A stall at a step, for tests: the mover says where it
				// is and waits for a line on its standard input (or its
				// end), then goes on as if nothing happened meanwhile.
				mv.Pause = func(step string) {
					if step != pauseAfter {
						return
					}
					fmt.Fprintf(cmd.OutOrStdout(), "paused after %s\n", step)
					_, _ = bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				}
			}
			moverGC()
			ctx := cmd.Context()
			if abort {
				return abortUntil(ctx, mv, deadline, func() { redial(cfg, nodes, down) }, cmd.OutOrStdout())
			}
			rep, err := moveUntil(ctx, mv, resume, deadline, func() { redial(cfg, nodes, down) }, cmd.OutOrStdout())
			if err != nil {
				if errors.Is(err, control.ErrStopped) {
					<-ctx.Done() // wait to be killed, as a mover killed at that step
					return exitCode(3)
				}
				return err
			}
			printReport(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	mf := move.Flags()
	mf.StringVar(&path, "config", "", "the proxies' configuration file (YAML)")
	mf.StringVar(&to, "to", "", "the upstream the queue moves to")
	mf.BoolVar(&resume, "resume", false, "complete the move in progress of QUEUE")
	mf.BoolVar(&abort, "abort", false, "roll back the move in progress of QUEUE (before its flip)")
	mf.BoolVar(&replace, "replace", false, "overwrite keys of QUEUE the target already has")
	mf.BoolVar(&deleteSource, "delete-source", false, "delete the source's keys of QUEUE after the flip")
	mf.DurationVar(&deadline, "deadline", control.DefaultDeadline, "how long to go on resuming a move (or running an --abort again) that stopped on a fault it can wait out "+
		"(a replica down or resyncing, a failover, a proxy that did not acknowledge, a hold released at --max-hold); 0: stop at the first")
	mf.DurationVar(&replicaWait, "replica-wait", control.DefaultReplicaWait, "how long, before a hold, to wait for the replicas of the source and the target "+
		"to confirm the copy (ack_replicas within ack_timeout) while the queue is served, at most --deadline; 0: not at all (the hold's own confirmations refuse at once)")
	mf.DurationVar(&wait, "wait", 0, "how long to wait for the proxies' acknowledgements (default 2 x control.lease + timeouts.hold)")
	mf.StringVar(&rate, "rate", strconv.Itoa(keycopy.DefaultRate), "pace of the bulk copy while the queue is served (the round that reads every key, large keys read whole), bytes of values per second (units k, M, G, KiB, MiB, GiB; 0 for unlimited); the rounds of changed keys and the copy under the hold are never paced")
	mf.DurationVar(&maxHold, "max-hold", 0, "most time the copy under the hold may take before the queue is released and copied again while served (default timeouts.hold / 2)")
	mf.BoolVar(&holdCopy, "hold-copy", false, "hold the queue for the whole copy (no tracking: for small queues, or a source that refuses both PSYNC and CONFIG SET)")
	mf.StringVar(&track, "track", tail.TrackAuto, "how the copy while served learns what changes on the source: replication (its replication stream, member by member), keyspace (keyspace notifications, key by key) or auto (replication where the source allows it)")
	mf.StringVar(&stopAfter, "stop-after", "", "stop after a step (copying, held, copied, flipping, target-flipped, flipped, deleted) and wait to be killed")
	_ = mf.MarkHidden("stop-after")
	mf.StringVar(&pauseAfter, "pause-after", "", "pause after a step (copying, held, copied, flipping, target-flipped, flipped, deleted) until a line on the standard input")
	_ = mf.MarkHidden("pause-after")

	var spath string
	status := &cobra.Command{
		Use:   "status --config FILE",
		Short: "Print the control table of every upstream: epochs, moved queues, proxies and their leases, moves in progress",
		Long: "Print the control table of every upstream: epochs, moved queues, proxies and their leases, moves in " +
			"progress.\n\n" + configCredentialsHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, nodes, down, err := controlNodes(spath)
			if err != nil {
				return err
			}
			defer closeNodes(nodes)
			for _, name := range slices.Sorted(maps.Keys(down)) {
				fmt.Fprintf(cmd.OutOrStdout(), "upstream %s: unreachable: %v\n\n", name, down[name])
			}
			_, err = control.Status(cmd.Context(), cmd.OutOrStdout(), nodes)
			return err
		},
	}
	status.Flags().StringVar(&spath, "config", "", "the proxies' configuration file (YAML)")
	cmd.AddCommand(move, status, newLeftoversCmd())
	return cmd
}

// controlNodes loads the configuration and dials every upstream (a node
// that cannot be dialed is left out; the mover names it when it needs it).
func controlNodes(path string) (*config.Config, map[string]*table.Node, map[string]error, error) {
	if path == "" {
		return nil, nil, nil, fmt.Errorf("--config FILE is required: the proxies' configuration names the upstreams")
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	nodes := map[string]*table.Node{}
	down := map[string]error{}
	var unreachable []string
	for _, name := range cfg.UpstreamNames() {
		o, err := nodeOptions(cfg, name)
		if err != nil {
			closeNodes(nodes)
			return nil, nil, nil, err
		}
		n, err := table.Dial(o)
		if err != nil {
			unreachable = append(unreachable, err.Error())
			down[name] = err
			continue
		}
		nodes[name] = n
	}
	if len(nodes) == 0 {
		return nil, nil, nil, fmt.Errorf("no upstream reachable: %s", strings.Join(unreachable, "; "))
	}
	return cfg, nodes, down, nil
}

// nodeOptions is how the control commands reach upstream name.
func nodeOptions(cfg *config.Config, name string) (table.NodeOptions, error) {
	u := cfg.Upstreams[name]
	t, err := upstreamTLS(name, u.TLS)
	if err != nil {
		return table.NodeOptions{}, err
	}
	so, err := sentinelOptions(name, u, cfg.Timeouts.Dial)
	if err != nil {
		return table.NodeOptions{}, err
	}
	// A master set under Sentinel is reached through valkey-go's Sentinel
	// client: the mover finds the primary as the proxies do. Its replies
	// are awaited as long as the proxies await an upstream's
	// (timeouts.upstream), not the dial timeout: a loaded node answers the
	// mover's pipelines and its replication stream's handshake in seconds,
	// and that must not fail a move.
	return table.NodeOptions{Name: name, Address: u.Address, Sentinel: so, Username: u.Username,
		Password: u.Password, DB: u.DB, TLS: t, Timeout: cfg.Timeouts.Dial, ReplyTimeout: cfg.Timeouts.Upstream,
		ClientName: table.MoverClientName, RESP2: true,
		AckReplicas: u.AckReplicas, AckTimeout: u.AckTimeout}, nil
}

// redial dials again the upstreams that were unreachable (down), moving
// those it reaches now into nodes.
func redial(cfg *config.Config, nodes map[string]*table.Node, down map[string]error) {
	for _, name := range slices.Sorted(maps.Keys(down)) {
		o, err := nodeOptions(cfg, name)
		if err == nil {
			var n *table.Node
			if n, err = table.Dial(o); err == nil {
				nodes[name] = n
				delete(down, name)
				continue
			}
		}
		down[name] = err
	}
}

func closeNodes(nodes map[string]*table.Node) {
	for _, n := range nodes {
		n.Close()
	}
}

// checkRole runs the fence of the role the configuration names for n,
// writing nothing: the wire-6 check on a module node, the legacy brand on a
// scripts node.
func checkRole(ctx context.Context, cfg *config.Config, m *shamap.Map, n *table.Node) error {
	role := cfg.Upstreams[n.Name].Role
	var err error
	if role == config.RoleScripts {
		_, err = fence.CheckScripts(ctx, fence.FromValkey(n.C), m.LegacyBrand, false)
	} else {
		_, err = fence.CheckModule(ctx, fence.FromValkey(n.C), m, false)
	}
	if err != nil {
		return fmt.Errorf("not fenced as a %s node (its configured role): %w", role, err)
	}
	return nil
}

// printReport prints what a move did.
func printReport(w io.Writer, r *control.Report) {
	fmt.Fprintf(w, "moved %s from %s to %s: held at epoch %d, flipped at epoch %d, held for %v\n",
		r.Queue, r.From, r.To, r.HoldEpoch, r.FlipEpoch, r.Held.Round(time.Millisecond))
	switch {
	case r.HoldCopy:
		fmt.Fprintf(w, "copied under the hold (--hold-copy) in %v\n", r.HoldWork.Round(time.Millisecond))
	case r.Rounds == 0:
		fmt.Fprintf(w, "copied and verified before the mover stopped\n")
	default:
		fmt.Fprintf(w, "copied while served: %d rounds in %v; under the hold: %d changed keys in %v; holds released: %d\n",
			r.Rounds, r.PreCopy.Round(time.Millisecond), r.TailKeys, r.HoldWork.Round(time.Millisecond), r.Released)
		fmt.Fprintf(w, "tracking: %s; %d changes recorded, restarted %d times\n", r.Tracking, r.Events, r.Restarts)
	}
	fmt.Fprintf(w, "keys copied: %d (job rows %d)\n", r.Keys, r.Rows)
	fmt.Fprintf(w, "written: %d keys, %d bytes, %d keys in chunks, %d elements of large keys patched\n", r.Copied, r.Bytes, r.Chunked, r.Patched)
	var states []string
	for _, s := range slices.Sorted(maps.Keys(r.Jobs)) {
		states = append(states, fmt.Sprintf("%s %d", s, r.Jobs[s]))
	}
	if len(states) == 0 {
		states = []string{"none"}
	}
	fmt.Fprintf(w, "jobs: %s\n", strings.Join(states, ", "))
	if len(r.Other) > 0 {
		fmt.Fprintf(w, "other keys (not job-core, copied too): %s\n", strings.Join(r.Other, ", "))
	}
	slices.SortFunc(r.Longest, func(a, b keycopy.RoundTrip) int { return strings.Compare(a.Node, b.Node) })
	for _, rt := range r.Longest {
		fmt.Fprintf(w, "longest round trip to %s: %v (%s, %d commands)\n", rt.Node, rt.Took.Round(10*time.Microsecond), rt.What, rt.Commands)
	}
	for _, sc := range r.Slowest {
		switch {
		case sc.Threshold < 0:
			fmt.Fprintf(w, "slowest command on %s: unknown (its slowlog is off)\n", sc.Node)
		case sc.Took == 0:
			fmt.Fprintf(w, "slowest command on %s: none past its slowlog-log-slower-than (%v)\n", sc.Node, sc.Threshold)
		default:
			fmt.Fprintf(w, "slowest command on %s: %v (%s; its slowlog keeps those past %v)\n", sc.Node, sc.Took, sc.Command, sc.Threshold)
		}
	}
	fmt.Fprintf(w, "proxies acknowledged: %d %s\n", len(r.Acked), strings.Join(r.Acked, " "))
	fmt.Fprintf(w, "proxies waited out (lease expired): %d %s\n", len(r.WaitedOut), strings.Join(r.WaitedOut, " "))
	if r.SourceDeleted {
		fmt.Fprintf(w, "source keys deleted\n")
	} else {
		fmt.Fprintf(w, "source keys kept on %s, on purpose (no --delete-source): `emqproxy queue leftovers --remove` deletes them\n", r.From)
	}
}

// Backoff between two attempts of a move or an abort (retryUntil).
const (
	firstRetry = time.Second
	maxRetry   = 15 * time.Second
)

// moveUntil runs the move (or resumes it) and, while it stops on a fault
// it can wait out (control.Mover.MayResume), waits and tries again
// (retryUntil): a Resume once the mover wrote its record, a Run before. A
// fault that needs a person (a refusal, a move taken over or aborted by
// another command) ends it at once.
func moveUntil(ctx context.Context, mv *control.Mover, resume bool, deadline time.Duration, redial func(), out io.Writer) (*control.Report, error) {
	var rep *control.Report
	err := retryUntil(ctx, mv, deadline, redial, out, "attempt", func() (err error) {
		if resume {
			rep, err = mv.Resume(ctx)
		} else {
			rep, err = mv.Run(ctx)
		}
		resume = resume || mv.Recorded()
		return err
	}, func(err error) bool { return mv.MayResume(ctx, err) })
	return rep, err
}

// abortUntil runs --abort and, while it stops on a fault it can wait out
// (control.AbortMayRetry: what it says to run --abort again for, or to try
// again when an upstream is back), waits and runs it again (retryUntil).
// An attempt that finds no move after an earlier one stopped means the
// earlier one removed the record before it stopped (its confirmation on
// the replicas failed, say), or another command did: the abort is done
// once every upstream's replicas confirm that (control.Mover.ConfirmAll),
// and waits for them as for any other fault until then.
func abortUntil(ctx context.Context, mv *control.Mover, deadline time.Duration, redial func(), out io.Writer) error {
	first := true
	return retryUntil(ctx, mv, deadline, redial, out, "abort attempt", func() error {
		err := mv.Abort(ctx)
		if !first && errors.Is(err, control.ErrNoMove) {
			if err := mv.ConfirmAll(ctx); err != nil {
				return fmt.Errorf("%s has no move in progress any more, but that is not confirmed: %w: a failover before its replicas have it brings the move back (queue status shows it): run --abort again then", mv.Queue, err)
			}
			fmt.Fprintf(out, "aborted: %s has no move in progress any more, and every upstream's replicas confirm it\n", mv.Queue)
			return nil
		}
		first = false
		return err
	}, func(err error) bool { return control.AbortMayRetry(ctx, err) })
}

// retryUntil runs try and, while it stops on a fault it can wait out
// (may), waits, dials the upstreams that were unreachable again (redial)
// and runs it again, until deadline has passed since the start. Each wait
// is said with what stopped the attempt (name: "attempt", "abort
// attempt"); the last error is returned with the number of attempts. The
// waits double from firstRetry up to maxRetry, and the last one ends at
// the deadline, so the last attempt starts then at the latest rather than
// a whole back-off before it. A wait after an upstream that did not
// answer (unreachable when the attempt began, or not answering when it
// stopped: a node that restarted, failed over or stopped under the copy)
// ends as soon as every upstream answers again (backOff): under faults
// the windows between two are short, and a whole back-off after one
// spends them waiting.
func retryUntil(ctx context.Context, mv *control.Mover, deadline time.Duration, redial func(), out io.Writer, name string, try func() error, may func(error) bool) error {
	end := mv.Until // the start plus deadline
	pause := firstRetry
	for attempt := 1; ; attempt++ {
		err := try()
		left := time.Until(end)
		if err == nil || left <= 0 || !may(err) {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt)
			}
			return err
		}
		wait := min(pause, left)
		unreachable := errors.Is(err, control.ErrUnreachable) || !mv.Answering(ctx)
		how := "waiting"
		if unreachable {
			how = "waiting until every upstream answers, at most"
		}
		fmt.Fprintf(out, "%s %d stopped: %v\n%s %v, then trying again (--deadline %v, %v left)\n",
			name, attempt, err, how, wait.Round(time.Millisecond), deadline, left.Round(time.Second))
		if !backOff(ctx, wait, unreachable, func() bool { redial(); return mv.Answering(ctx) }) {
			return err
		}
		pause = min(2*pause, maxRetry)
		redial()
	}
}

// answerPoll is how often a back-off after an unreachable upstream asks
// whether every upstream answers again.
const answerPoll = 250 * time.Millisecond

// backOff waits d (false: ctx ended first). early: the attempt stopped on
// an upstream that did not answer, and the wait ends as soon as answering
// reports every upstream back (a node restarted, a failover done), instead
// of the whole back-off after it: the attempt that follows needs nothing
// else. Any other stop (a replica behind, a proxy that did not
// acknowledge a hold) waits the whole back-off, so a fault that persists
// does not turn into holds in a tight loop.
func backOff(ctx context.Context, d time.Duration, early bool, answering func() bool) bool {
	end := time.After(d)
	var poll <-chan time.Time
	if early {
		t := time.NewTicker(answerPoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-end:
			return true
		case <-poll:
			if answering() {
				return true
			}
		}
	}
}
