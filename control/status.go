package control

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"
)

// Status prints, for every node: its epoch and table, the entries the
// proxies skip (Table.Skipped, and an owner that is not one of nodes), the
// proxies registered there with the epoch each applied and the age of its
// lease, and the moves in progress; then the merged table the proxies
// apply. Unreachable nodes are named. It returns the merged table.
func Status(ctx context.Context, w io.Writer, nodes map[string]*table.Node) (table.Table, error) {
	var tables []table.Table
	now := time.Now().UnixMilli()
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		t, err := n.ReadTable(ctx)
		if err != nil {
			fmt.Fprintf(w, "upstream %s: %v\n\n", name, err)
			if t.Queues == nil {
				continue
			}
		}
		tables = append(tables, t)
		fmt.Fprintf(w, "upstream %s: epoch %d\n", name, t.Epoch)
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		if len(t.Queues) > 0 {
			fmt.Fprintln(tw, "  QUEUE\tEPOCH\tSTATE\tOWNER")
			for _, q := range slices.Sorted(maps.Keys(t.Queues)) {
				e := t.Queues[q]
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", q, e.Epoch, e.State, e.Owner)
			}
		}
		regs, err := n.Proxies(ctx)
		if err != nil {
			fmt.Fprintf(tw, "  proxies: %v\n", err)
		}
		if len(regs) > 0 {
			slices.SortFunc(regs, func(a, b table.Registration) int { return cmpString(a.ID, b.ID) })
			fmt.Fprintln(tw, "  PROXY\tAPPLIED\tLEASE AGE\tLEASE")
			for _, r := range regs {
				live := "expired"
				if r.Live {
					live = "live"
				}
				fmt.Fprintf(tw, "  %s\t%d\t%v\t%s\n", r.ID, r.Applied, time.Duration(now-r.Renewed)*time.Millisecond, live)
			}
		}
		for _, q := range slices.Sorted(maps.Keys(t.Skipped)) {
			fmt.Fprintf(tw, "  SKIPPED %q: %s\n", q, t.Skipped[q])
		}
		for _, q := range slices.Sorted(maps.Keys(t.Queues)) {
			if e := t.Queues[q]; e.State == table.Owned && nodes[e.Owner] == nil {
				fmt.Fprintf(tw, "  SKIPPED %q: owner %q is not an upstream of this configuration\n", q, e.Owner)
			}
		}
		for _, q := range movesOn(ctx, n, t) {
			rec, err := readRecord(ctx, n, q)
			if err != nil || rec == nil {
				continue
			}
			line := fmt.Sprintf("  MOVE %s: %s -> %s, step %s, started %v ago", q, rec.from, rec.to, rec.step,
				time.Duration(now-rec.started)*time.Millisecond)
			if rec.step != StepCopying {
				line += fmt.Sprintf(", held at epoch %d since %v", rec.epoch, time.Duration(now-rec.held)*time.Millisecond)
			}
			if rec.by != "" {
				line += ", by " + rec.by
			}
			fmt.Fprintln(tw, line)
			if p := keycopy.ReadProgress(ctx, n, q); p != nil {
				fmt.Fprintf(tw, "    progress (%v ago): %s\n", (time.Duration(now-p.Updated) * time.Millisecond).Round(time.Millisecond), p)
			}
		}
		if s := tail.NotifyStatus(ctx, n); s != "" {
			fmt.Fprintf(tw, "  %s\n", s)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	m := table.Merge(tables...)
	fmt.Fprintf(w, "table: epoch %d, %d moved or moving queue(s)\n", m.Epoch, len(m.Queues))
	for _, q := range slices.Sorted(maps.Keys(m.Queues)) {
		e := m.Queues[q]
		fmt.Fprintf(w, "  %s: %s %s (epoch %d)\n", q, e.State, e.Owner, e.Epoch)
	}
	return m, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
