package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/emqproxy/emqproxy/stand/node"
)

// Section 1c: one client at pipeline 1, in paired rounds. Issue 32's
// latency target (emqproxy's added p50 at most twemproxy's plus 10 µs) is
// a difference of a few tens of microseconds, and on a shared 2-core
// machine one client's p50 jumps between two levels (about 40 and 130 µs
// for the same path, as the other processes come and go): the medians of
// section 1b's three repetitions, taken a minute apart, put either path on
// either level. Here each round measures every path within seconds, the
// order rotated from round to round, and the target is the median over the
// rounds of each round's own difference, which the machine's state
// cancels from. goforward (bench/cmd/goforward) is the floor of the
// design: the same runtime, a goroutine per client, no parsing at all.

// oneClientRoundsPerRep is the rounds per repetition (--reps).
const oneClientRoundsPerRep = 5

// oneClientResult is section 1c's: p50s by path, one per round.
type oneClientResult struct {
	paths []string
	p50   map[string][]float64
}

// oneClient runs the rounds over paths (the direct path first), each
// round in every layout in turn. It leaves the run in the shared layout.
func (r *runner) oneClient(ctx context.Context, paths []target) error {
	for _, l := range r.layouts {
		l.res.one = oneClientResult{p50: map[string][]float64{}}
		for _, t := range paths {
			l.res.one.paths = append(l.res.one.paths, t.name)
		}
	}
	rounds := oneClientRoundsPerRep * r.reps
	for round := range rounds {
		for _, l := range r.layouts {
			if err := r.inLayout(l); err != nil {
				return err
			}
			res := &l.res.one
			for i := range paths {
				t := paths[(round+i)%len(paths)]
				p, err := r.latGet(ctx, t, 1)
				if err != nil {
					return err
				}
				res.p50[t.name] = append(res.p50[t.name], p.p50)
			}
			r.logf("one client %s round %d/%d: %s", shortLayout(l), round+1, rounds, res.roundText(round))
		}
	}
	return r.inLayout(r.shared())
}

func (o oneClientResult) roundText(round int) string {
	var s string
	for _, p := range o.paths {
		s += fmt.Sprintf("%s %.0f µs  ", p, o.p50[p][round])
	}
	return s
}

// added returns, per round, path's p50 minus base's.
func (o oneClientResult) added(path, base string) []float64 {
	return diffs(o.p50[path], o.p50[base])
}

// diffs returns, per round, a's figure minus b's (ratios' difference).
func diffs(a, b []float64) []float64 {
	d := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		d = append(d, a[i]-b[i])
	}
	return d
}

// spread is a set of figures' median and range, as text.
func spread(xs []float64) string { return spreadPrec(xs, 0) }

// spreadPrec is spread with prec decimals.
func spreadPrec(xs []float64, prec int) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f (%.*f to %.*f)", prec, median(xs), prec, slices.Min(xs), prec, slices.Max(xs))
}

// writeOneClient writes section 1c, each layout's rounds in turn; twem
// names twemproxy's path.
func (r *runner) writeOneClient(w func(string, ...any), twem string) {
	measured := r.layoutsThat(func(s *results) bool { return len(s.one.paths) > 0 })
	if len(measured) == 0 {
		return
	}
	first := measured[0].res.one
	w("\n## 1c. One client at pipeline 1, in paired rounds (issue 32's latency target)\n\n")
	w("%d rounds in each layout, a round in one layout then the same round in the next. Each round runs redis-benchmark `-c 1 -P 1 -t get -n %d` against every path in turn, the order rotated each round, so a round's figures are taken within seconds of each other; \"added\" is a path's p50 minus the direct path's in the same round, and the last column is a path's p50 minus twemproxy's in the same round. Medians over the rounds, with their range: one client's p50 moves between levels tens of microseconds apart as the machine's other work comes and goes, and a round's own differences cancel that. `goforward` (bench/cmd/goforward) is the floor of emqproxy's design: the same runtime with GOMAXPROCS 1, a goroutine per client and the network poller, a read and a write on each side per call and nothing else. A path marked `(unix)` is the same process reached over its Unix socket (redis-benchmark `-s`), the hop a sidecar's application makes; the proxy reaches the node over TCP as on every path.\n",
		len(first.p50[first.paths[0]]), latGetRequests(1))
	for _, l := range measured {
		w("\n### 1c, %s\n\nHow: %s.\n\n", l.name, l.how(r.cpus))
		writeOneClientTable(w, l.res.one, twem)
	}
}

// writeOneClientTable writes one layout's rounds of section 1c.
func writeOneClientTable(w func(string, ...any), o oneClientResult, twem string) {
	direct := o.paths[0]
	w("| path | p50 µs | added p50 µs | p50 minus twemproxy's, µs |\n|---|---|---|---|\n")
	for _, p := range o.paths {
		add, vsTwem := "-", "-"
		if p != direct {
			add = spread(o.added(p, direct))
		}
		if p != twem && p != direct {
			vsTwem = spread(o.added(p, twem))
		}
		w("| %s | %s | %s | %s |\n", p, spread(o.p50[p]), add, vsTwem)
	}
}

// oneClientCheck is issue 32's latency target from the paired rounds:
// emqproxy's p50 at most twemproxy's plus 10 µs, the median of the rounds'
// differences (the direct path's p50 is in both added figures, and cancels).
func (r *runner) oneClientCheck(px, twem string) (check, bool) {
	o := r.one
	if len(o.p50[px]) == 0 || len(o.p50[twem]) == 0 {
		return check{}, false
	}
	direct := o.paths[0]
	d := median(o.added(px, twem))
	return check{"1 client P1 GET: added p50 ≤ twemproxy's + 10 µs (section 1c, paired rounds)",
		fmt.Sprintf("%.0f µs vs %.0f µs added; the rounds' difference %.0f µs", median(o.added(px, direct)), median(o.added(twem, direct)), d),
		d <= 10}, true
}

// oneClientPaths starts goforward in front of direct's server and runs the
// rounds over direct, emqproxy, twemproxy and goforward.
func (r *runner) oneClientPaths(ctx context.Context, direct, px, twem target) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	gf, err := r.startProc("goforward", addr, answersPing, nil, r.goforwardBin, "--listen", addr, "--upstream", direct.addr)
	if err != nil {
		return err
	}
	defer gf.stop()
	paths := []target{direct, px, twem, {name: "goforward", addr: gf.addr, pid: gf.pid()}}
	for _, t := range []target{px, twem} {
		if t.unix != "" {
			paths = append(paths, target{name: t.name + " (unix)", addr: t.unix, pid: t.pid})
		}
	}
	return r.oneClient(ctx, paths)
}

// oneClientOnly runs section 1c alone (--only oneclient): emqproxy with
// its defaults and twemproxy in front of a module node, as the full run
// has them, and goforward.
func (r *runner) oneClientOnly(ctx context.Context, kind proxyKind) error {
	return r.withPaths(ctx, kind, r.oneClientPaths)
}

// withPaths starts a module node, emqproxy with its defaults (as the full
// run starts it) and twemproxy in front of it, runs f over the three
// paths, and stops them: a section run alone (--only).
func (r *runner) withPaths(ctx context.Context, kind proxyKind, f func(ctx context.Context, direct, px, twem target) error) error {
	var err error
	if r.module, err = node.Start(node.Options{Role: node.Module}); err != nil {
		return err
	}
	defer r.module.Stop()
	spec := proxySpec{name: "emqproxy", kind: kind, audit: filepath.Join(r.tmp, "emqproxy-audit.log")}
	if kind == kindBinary {
		spec.unix = filepath.Join(r.tmp, "emqproxy.sock")
	}
	px, err := r.startProxy(spec)
	if err != nil {
		return err
	}
	defer px.stop()
	tw, err := r.startTwemproxy()
	if err != nil {
		return err
	}
	defer tw.stop()
	pxt := target{name: "emqproxy", addr: px.addr, pid: px.pid()}
	if spec.unix != "" {
		pxt.unix = "unix:" + spec.unix
	}
	return f(ctx, target{name: "direct", addr: r.module.Addr}, pxt,
		target{name: "twemproxy", addr: tw.addr, pid: tw.pid(), unix: "unix:" + r.twemUnixSocket()})
}
