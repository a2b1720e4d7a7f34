package chaos

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Summary is what a report says besides the checker's result.
type Summary struct {
	Seed     uint64
	Rerun    string // the command that replays the campaign
	Duration time.Duration
	History  string // the history file
	Server   string
	Started  time.Time
	Drain    time.Duration // how long the final drain took
	Timeline []string      // a line per fault, as the nemesis injected it
}

// WriteReport writes the campaign's report: the seed and the command that
// reruns it first, then faults by kind, calls by outcome, each property's
// verdict, and the violations with the history lines that show them.
func WriteReport(w io.Writer, s Summary, r *Result) {
	fmt.Fprintf(w, "# Fault campaign, seed %d\n\n", s.Seed)
	fmt.Fprintf(w, "Rerun: `%s`\n\n", s.Rerun)
	fmt.Fprintf(w, "Started %s, faults for %v, drain %v, server %s; history: %s\n\n",
		s.Started.UTC().Format(time.RFC3339), s.Duration.Round(time.Second), s.Drain.Round(time.Millisecond), s.Server, s.History)
	fmt.Fprintf(w, "## Verdict: %s\n\n", map[bool]string{true: "every property held", false: "VIOLATED"}[r.OK()])
	fmt.Fprintf(w, "| property | verdict |\n|---|---|\n")
	for _, p := range Properties {
		n := 0
		for _, v := range r.Violations {
			if v.Property == p {
				n++
			}
		}
		verdict := "held"
		if n > 0 {
			verdict = fmt.Sprintf("VIOLATED (%d)", n)
		}
		fmt.Fprintf(w, "| %s | %s |\n", p, verdict)
	}
	fmt.Fprintf(w, "\n## Faults injected, by kind\n\n| fault | injected | of which failed or refused |\n|---|---|---|\n")
	total, failed := 0, 0
	for _, k := range sortedKeys(r.Faults) {
		fmt.Fprintf(w, "| %s | %d | %d |\n", k, r.Faults[k], r.FaultErrors[k])
		total += r.Faults[k]
		failed += r.FaultErrors[k]
	}
	fmt.Fprintf(w, "| total | %d | %d |\n", total, failed)
	if len(r.Moves) > 0 {
		fmt.Fprintf(w, "\n## Moves, by outcome\n\nWhere the queue was after each move fault: on the move's target (moved), on its source (refused, aborted or rolled back; a stopped-and-aborted move must stay), on a third node, or not known.\n\n| fault | %s |\n|---|---|---|---|---|\n", strings.Join(moveOutcomes, " | "))
		for _, k := range sortedKeys(r.Moves) {
			fmt.Fprintf(w, "| %s |", k)
			for _, o := range moveOutcomes {
				fmt.Fprintf(w, " %d |", r.Moves[k][o])
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "\n## Calls, by outcome\n\n| operation | ok | err | timeout | hung |\n|---|---|---|---|---|\n")
	var sum [4]int
	for _, op := range sortedKeys(r.Calls) {
		m := r.Calls[op]
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d |\n", op, m["ok"], m["err"], m["timeout"], m["hung"])
		for i, k := range []string{"ok", "err", "timeout", "hung"} {
			sum[i] += m[k]
		}
	}
	fmt.Fprintf(w, "| all | %d | %d | %d | %d |\n", sum[0], sum[1], sum[2], sum[3])
	if l := r.Leftovers; l["runs"] > 0 {
		fmt.Fprintf(w, "\nLeftovers at the end (`queue leftovers --remove`): %d keys of %d queue(s) on nodes that do not own them, %d removed, %d queue(s) skipped",
			l["keys"], l["queues"], l["removed"], l["skipped"])
		if l["errors"] > 0 {
			fmt.Fprintf(w, ", %d run(s) failed (see the history, kind %q)", l["errors"], KindLeftovers)
		}
		fmt.Fprintln(w, ".")
	}
	fmt.Fprintf(w, "\nEnqueues acknowledged with 1: %d. Jobs left after the drain, by set:", r.Acked)
	for _, k := range Sets {
		fmt.Fprintf(w, " %s %d", k, r.Remaining[k])
	}
	fmt.Fprintln(w)
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	if len(r.Violations) > 0 {
		fmt.Fprintf(w, "\n## Violations\n\n```\n")
		WriteViolations(w, r, 50)
		fmt.Fprintf(w, "```\n")
	}
	if len(s.Timeline) > 0 {
		tl := s.Timeline
		more := ""
		if len(tl) > timelineLines {
			more = fmt.Sprintf("\n... and %d more lines in the history (kind \"fault\")", len(tl)-timelineLines)
			tl = tl[:timelineLines]
		}
		fmt.Fprintf(w, "\n## Fault timeline\n\n```\n%s%s\n```\n", strings.Join(tl, "\n"), more)
	}
}

// timelineLines is how much of the fault timeline a report prints.
const timelineLines = 300

// WriteViolations prints up to max violations, each with its history lines.
func WriteViolations(w io.Writer, r *Result, max int) {
	for i, v := range r.Violations {
		if i == max {
			fmt.Fprintf(w, "... and %d more\n", len(r.Violations)-max)
			return
		}
		fmt.Fprintf(w, "[%s] %s\n", v.Property, v.What)
		for _, e := range v.Events {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

func readHistoryFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadHistory(f)
}
