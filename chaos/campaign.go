package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Config is one campaign.
type Config struct {
	Seed     uint64
	Duration time.Duration // how long faults are injected
	Kinds    []string      // the kinds of fault (AllFaults when nil)
	Gap      time.Duration // a lane's pause between faults (gap to 2*gap; 2 s when 0)
	Workers  int           // 16 when 0
	Suffix   string        // the campaign's queues are Queues with this suffix
	Rerun    string        // the command that replays it, for the report
	Logf     func(format string, args ...any)
}

// Outcome is what a campaign produced.
type Outcome struct {
	Result  *Result
	Summary Summary
	History string
	Report  string // the report's text
}

// Run runs one campaign on the fleet: workers and nemesis for the
// duration, then the faults healed, the queues drained, the final state
// read and the checker run. An error means the campaign could not be
// judged (the fleet did not come back); violations are in the result.
func Run(f *Fleet, cfg Config) (*Outcome, error) {
	if cfg.Kinds == nil {
		cfg.Kinds = AllFaults
	}
	if cfg.Gap == 0 {
		cfg.Gap = 2 * time.Second
	}
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	queues := make([]string, len(Queues))
	owner := map[string]string{}
	for i, q := range Queues {
		queues[i] = q + cfg.Suffix
		owner[queues[i]] = FileRoutes[q]
	}
	histPath := filepath.Join(f.Dir, fmt.Sprintf("history-%d.jsonl", cfg.Seed))
	h, err := NewHistory(histPath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	started := time.Now()
	h.Add(Event{Kind: KindConfig, Seed: cfg.Seed, CallBound: CallBound.Milliseconds(),
		Detail: fmt.Sprintf("duration %v, kinds %s, gap %v, workers %d, queues %s; rerun: %s",
			cfg.Duration, strings.Join(cfg.Kinds, ","), cfg.Gap, cfg.Workers, strings.Join(queues, ","), cfg.Rerun)})
	schedule := Schedule(cfg.Seed, cfg.Duration, cfg.Kinds, cfg.Gap)
	for _, fl := range schedule {
		h.Add(Event{Kind: KindInfo, Proc: "schedule", Fault: fl.Kind, Detail: fl.String()})
	}
	logf("seed %d: %d faults scheduled over %v; history %s", cfg.Seed, len(schedule), cfg.Duration, histPath)

	n := &nemesis{f: f, h: h, queues: queues, owner: owner}
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for i := range cfg.Workers {
		w := newWorker(f, h, queues, i, cfg.Seed)
		workers.Add(1)
		go func() { defer workers.Done(); w.run(stop) }()
	}

	start := time.Now()
	end := start.Add(cfg.Duration)
	var lanesWG sync.WaitGroup
	for li := range lanes {
		var mine []Fault
		for _, fl := range schedule {
			if fl.Lane == li {
				mine = append(mine, fl)
			}
		}
		lanesWG.Add(1)
		go func() { defer lanesWG.Done(); n.runLane(start, mine, end) }()
	}
	lanesWG.Wait() // each lane's last fault healed itself
	logf("faults stopped after %v", time.Since(start).Round(time.Millisecond))

	// Heal what a fault may have left, and let every sidecar be ready.
	n.heal()
	for _, sc := range f.Sidecars {
		if !sc.Ready() {
			if err := sc.WaitReady(30 * time.Second); err != nil {
				_ = sc.Kill()
				if err := sc.Start(); err != nil {
					return nil, err
				}
				if err := sc.WaitReady(30 * time.Second); err != nil {
					return nil, err
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, note := range n.finishMoves(ctx) {
		h.Add(Event{Kind: KindInfo, Proc: "nemesis", Detail: note})
	}
	for _, s := range f.Sets {
		p, err := waitAnyPrimary(s, 30*time.Second)
		if err != nil {
			return nil, err
		}
		if err := s.Other(p).WaitSynced(30 * time.Second); err != nil {
			return nil, err
		}
	}
	// The workers keep working a moment on the healed fleet, then stop.
	time.Sleep(500 * time.Millisecond)
	close(stop)
	workersDone := make(chan struct{})
	go func() { workers.Wait(); close(workersDone) }()
	select {
	case <-workersDone:
	case <-time.After(CallBound + 5*time.Second):
		h.Add(Event{Kind: KindInfo, Proc: "campaign", Detail: "workers still in a call after their bound"})
	}
	logf("workers stopped; draining")

	drainStart := time.Now()
	if err := drain(f, h, queues, drainStart.Add(90*time.Second)); err != nil {
		h.Add(Event{Kind: KindInfo, Proc: "campaign", Detail: "drain: " + err.Error()})
		logf("drain: %v", err)
	}
	drained := time.Since(drainStart)

	// What the moves left behind: the keys of a queue on a node that does
	// not own it, removed; the final state then shows any that remain
	// (PropStrays).
	// The reads of the end, with time of their own: finishMoves may have
	// used all of its.
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer rcancel()
	left := n.leftovers(rctx)
	h.Add(left)
	logf("queue leftovers --remove: %s", left.Detail)

	// The final state: the owner of each queue, the nodes' statistics.
	n.refreshOwners(rctx)
	final, err := readFinal(rctx, f, n.owner)
	if err != nil {
		return nil, err
	}
	for _, s := range f.Sets {
		for _, nd := range s.Nodes {
			n.stats(s.Name, nd, "module")
		}
	}
	n.stats(ScriptsC, f.Scripts, "scripts")
	if err := h.Close(); err != nil {
		return nil, err
	}
	finalPath := filepath.Join(f.Dir, fmt.Sprintf("final-%d.json", cfg.Seed))
	if b, err := json.Marshal(final); err == nil {
		if err := os.WriteFile(finalPath, b, 0o644); err != nil {
			return nil, err
		}
	}
	events, err := readHistoryFile(histPath)
	if err != nil {
		return nil, err
	}
	res := Check(events, final)
	sum := Summary{Seed: cfg.Seed, Rerun: cfg.Rerun, Duration: cfg.Duration, History: histPath,
		Started: started, Drain: drained, Timeline: n.lines, Server: serverName(f.Server)}
	var b strings.Builder
	WriteReport(&b, sum, res)
	out := &Outcome{Result: res, Summary: sum, History: histPath, Report: b.String()}
	if err := os.WriteFile(filepath.Join(f.Dir, fmt.Sprintf("report-%d.md", cfg.Seed)), []byte(out.Report), 0o644); err != nil {
		return out, err
	}
	return out, nil
}

func serverName(s string) string {
	if s == "" {
		return "redis-server (Debian)"
	}
	return s
}

// readFinal reads each queue on its owner, and notes the other nodes that
// still hold keys of it.
func readFinal(ctx context.Context, f *Fleet, owner map[string]string) (Final, error) {
	final := Final{Queues: map[string]QueueFinal{}}
	addr := map[string]string{ScriptsC: f.Scripts.Addr}
	for _, s := range f.Sets {
		p, err := s.Primary()
		if err != nil {
			return final, err
		}
		addr[s.Name] = p.Addr
	}
	for q, up := range owner {
		qf := QueueFinal{Owner: up}
		for _, u := range Upstreams {
			c, err := dial(addr[u])
			if err != nil {
				return final, err
			}
			if u == up {
				qf.Jobs, err = readQueue(ctx, c, q)
			} else {
				var k int
				if k, err = queueKeys(ctx, c, q); k > 0 {
					qf.Strays = append(qf.Strays, fmt.Sprintf("%s (%d keys)", u, k))
				}
			}
			c.Close()
			if err != nil {
				return final, fmt.Errorf("chaos: read %s on %s: %w", q, u, err)
			}
		}
		final.Queues[q] = qf
	}
	return final, nil
}
