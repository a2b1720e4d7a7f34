package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/bench/jobmix"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Section 7: the cost of ack_replicas. A module primary with one replica
// of its own (the other sections' module node has none: a replica costs
// the primary its replication stream), and two `emqproxy serve` in front
// of it, the same configuration but for `ack_replicas: 1` (ack_timeout
// 1s): every batch of a client that writes then ends with the proxy's
// `WAIT 1 1000`. The job mix is all writes (enqueue, claim, complete), so
// every batch carries one WAIT.

// The section's target names.
const (
	ackOff = "emqproxy, ack_replicas 0 (primary with a replica)"
	ackOn  = "emqproxy, ack_replicas 1"
)

// ackResult is the section's measurements.
type ackResult struct {
	ran     bool
	mix     map[string][]mixResult // by pipeline and target
	waits   map[string]int64       // WAIT calls the primary served, by pipeline and target (all reps)
	latency map[string]mixResult   // one client, pipeline 1
	replica map[string]cpu         // the replica's CPU over the same runs
}

// ackReplicas measures section 7.
func (r *runner) ackReplicas(ctx context.Context, kind proxyKind) error {
	a := ackResult{ran: true, mix: map[string][]mixResult{}, waits: map[string]int64{}, latency: map[string]mixResult{}, replica: map[string]cpu{}}
	primary, err := node.Start(node.Options{Role: node.Module})
	if err != nil {
		return err
	}
	defer primary.Stop()
	replica, err := node.Start(node.Options{Role: node.Module, ReplicaOf: primary.Addr})
	if err != nil {
		return err
	}
	defer replica.Stop()
	if err := replica.WaitSynced(time.Minute); err != nil {
		return err
	}
	r.logf("ack_replicas: primary %s (pid %d), replica %s", primary.Addr, primary.PID(), replica.Addr)
	if kind != kindBinary {
		r.notes = append(r.notes, "section 7 (ack_replicas) needs `emqproxy serve`: not measured.")
		return nil
	}
	audit := func(name string) string { return filepath.Join(r.tmp, safeName(name)+"-audit.log") }
	off, err := r.startProxy(proxySpec{name: ackOff, kind: kind, audit: audit(ackOff), upstream: primary.Addr})
	if err != nil {
		return err
	}
	defer off.stop()
	on, err := r.startProxy(proxySpec{name: ackOn, kind: kind, audit: audit(ackOn), upstream: primary.Addr,
		upstreamKeys: "    ack_replicas: 1\n    ack_timeout: 1s\n" + indentKeys(r.ackKeys)})
	if err != nil {
		return err
	}
	defer on.stop()
	targets := []mixTarget{
		{name: ackOff, mode: jobmix.Legacy, addr: off.addr, pid: off.pid(), server: primary},
		{name: ackOn, mode: jobmix.Legacy, addr: on.addr, pid: on.pid(), server: primary},
	}
	for rep := range r.reps {
		for _, p := range []int{1, 16} {
			for _, t := range targets {
				w0, rc0 := waitsOf(primary.Addr), cpuOf(replica.PID())
				res, err := r.jobmixOnce(ctx, t, 50, p, r.mixWarmup, r.mixDur)
				if err != nil {
					return err
				}
				k := key2(strconv.Itoa(p), t.name)
				a.replica[k] = a.replica[k].plus(cpuOf(replica.PID()).sub(rc0))
				a.mix[k] = append(a.mix[k], res)
				a.waits[k] += waitsOf(primary.Addr) - w0
				r.logf("ack_replicas rep %d P%-2d %-48s %9.0f ops/s", rep+1, p, t.name, res.OpsPerSec)
			}
		}
	}
	for _, t := range targets {
		res, err := r.jobmixOnce(ctx, t, 1, 1, r.mixWarmup/2, r.latDur)
		if err != nil {
			return err
		}
		r.logf("ack_replicas latency 1 client P1 %-48s p50 %.0f us p99 %.0f us", t.name, res.P50us, res.P99us)
		a.latency[t.name] = res
	}
	r.ack = a
	return nil
}

// waitsOf returns the WAIT calls a node has served (INFO commandstats).
func waitsOf(addr string) int64 {
	b, err := node.RawDo(addr, "INFO", "commandstats")
	if err != nil {
		return 0
	}
	st, err := node.ParseCommandStats(string(b))
	if err != nil {
		return 0
	}
	return st["wait"]
}

// writeAck writes section 7.
func (r *runner) writeAck(w func(string, ...any)) {
	a := r.ack
	if !a.ran {
		return
	}
	w("\n## 7. ack_replicas (job mix, 50 clients, each on its own queue; a module primary with one replica)\n\n")
	w("Both proxies are `emqproxy serve` in front of the same primary, which has a replica (the baseline pays for replication too); \"ack_replicas 1\" adds `ack_replicas: 1`, `ack_timeout: 1s`: each write to the primary that carries a client batch with a write ends with one `WAIT 1 1000`, whose reply the proxy reads, and the batches written while it waits share the next one. The job mix's script calls are all writes (its pause reads are reads). WAIT per call is the primary's WAIT calls over the script calls of the same runs (warmup included, so approximate): how many calls one WAIT confirms (at most one per batch: 1 at pipeline 1, 1/16 at pipeline 16, without any sharing). Window %v after %v warmup, medians of %d interleaved repetitions.\n\n", r.mixDur, r.mixWarmup, r.reps)
	w("| pipeline | ack_replicas 0 | ack_replicas 1 | 1 / 0 | 1 / 0 of each pair, median (range) | WAIT per call (ack 1) |\n|---|---|---|---|---|---|\n")
	for _, p := range []int{1, 16} {
		off, on := a.median(p, ackOff), a.median(p, ackOn)
		k := key2(itoa(p), ackOn)
		w("| %d | %s | %s | %s | %s | %s |\n", p, kops(off), kops(on), ratio(on, off), a.pairs(p), ratio(float64(a.waits[k]), r.spendOf(a.mix[k]).ops))
	}
	w("\nWhere the time goes (all repetitions summed, per script call, as in section 2's CPU table; the replica's CPU from /proc/<pid>/stat over the same runs):\n\n")
	w("| pipeline | path | load generator µs/call | proxy µs/call | primary µs/call | replica µs/call | total µs/call | cores busy |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range []int{1, 16} {
		for _, name := range []string{ackOff, ackOn} {
			k := key2(itoa(p), name)
			s := r.spendOf(a.mix[k])
			rep := s.us(a.replica[k])
			busy := s.busy()
			if s.wall > 0 {
				busy += (a.replica[k].user + a.replica[k].sys).Seconds() / s.wall.Seconds()
			}
			w("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", p, name, s.us(s.load), s.us(s.path), s.us(s.server), rep, s.total()+rep, busy)
		}
	}
	w("\nSingle client, pipeline 1 (one call's latency; a claim includes its pause read, which is a read and waits for nothing):\n\n")
	w("| path | ops/s | p50 µs | p99 µs |\n|---|---|---|---|\n")
	for _, name := range []string{ackOff, ackOn} {
		l := a.latency[name]
		w("| %s | %.0f | %.0f | %.0f |\n", name, l.OpsPerSec, l.P50us, l.P99us)
	}
}

// pairs is ack 1 over ack 0 for each repetition's pair of runs (run one
// after the other, so a drift of the machine's load moves both): their
// median and range.
func (a ackResult) pairs(p int) string {
	off, on := a.mix[key2(itoa(p), ackOff)], a.mix[key2(itoa(p), ackOn)]
	var xs []float64
	for i := range min(len(off), len(on)) {
		if off[i].OpsPerSec > 0 {
			xs = append(xs, on[i].OpsPerSec/off[i].OpsPerSec)
		}
	}
	if len(xs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%.2f-%.2f)", median(xs), slices.Min(xs), slices.Max(xs))
}

func (a ackResult) median(p int, name string) float64 {
	var xs []float64
	for _, res := range a.mix[key2(itoa(p), name)] {
		xs = append(xs, res.OpsPerSec)
	}
	return median(xs)
}

// writeAckOnly writes the report of a run of section 7 alone (--only ack):
// <stem>-ack.md, beside the full runs' files; latest.md is left alone.
func (r *runner) writeAckOnly(stem string) error {
	return r.writeOnly(stem, "ack", "section 7 alone (`--only ack`)", r.writeAck)
}

// writeOnly writes the report of a section run alone: <stem>-<suffix>.md.
func (r *runner) writeOnly(stem, suffix, title string, section func(w func(string, ...any))) error {
	var text []byte
	w := func(format string, args ...any) { text = fmt.Appendf(text, format, args...) }
	w("# emqproxy benchmark: %s\n\n", title)
	w("| | |\n|---|---|\n")
	for _, kv := range r.machineInfo() {
		w("| %s | %s |\n", kv[0], kv[1])
	}
	for _, n := range r.notes {
		w("\n- Note: %s\n", n)
	}
	section(w)
	w("\n## Commands\n\n```\n")
	for _, c := range r.cmds {
		w("%s\n", c)
	}
	w("```\n\nGenerated configurations:\n\n")
	for _, c := range r.configs {
		w("%s:\n\n```yaml\n%s```\n\n", c.name, c.text)
	}
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(r.out, stem+"-"+suffix+".md")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s\nwritten: %s\n", text, path)
	return nil
}

// indentKeys indents each line of keys as an upstream's key.
func indentKeys(keys string) string {
	var b strings.Builder
	for _, l := range strings.Split(keys, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString("    " + strings.TrimSpace(l) + "\n")
		}
	}
	return b.String()
}
