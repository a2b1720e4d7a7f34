package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
)

// TestQueueMoveBench measures moves of a queue of EMQ_MOVE_JOBS jobs
// (default 1M: rows plus the pending, active, done and delayed sets, a
// quarter each) through two proxies while legacy clients enqueue, claim and
// complete on it, and on a queue of each node that does not move: today's
// mover (--hold-copy: the whole copy under the hold), the online mover at
// its default --rate (tracking the source's replication stream), unpaced
// (--rate 0), and at the default rate tracking keyspace notifications
// (--track keyspace), each on fresh nodes, in one run; and beside them
// Redis Cluster's own resharding of the same data under the same load
// (benchClusterReshard: redis-cli --cluster reshard of the queue's slot
// between two cluster-mode nodes, the row "redis cluster reshard"). Opt-in: EMQ_MOVE_BENCH=1 (several minutes); not part of make
// test. (The variables are not EMQPROXY_-prefixed: the proxies the test
// starts inherit them, and refuse a variable that names no key.)
// EMQ_MOVE_EVERY=2ms makes the moving queue's four clients enqueue only,
// one call every 2 ms each, instead of looping enqueue, claim and complete
// as fast as they can. It prints the hold, the calls that got TRYAGAIN, the slowest call
// on the moving queue, the p99 of the other queues' calls before and
// during the move, the copy rate and the longest command; for the
// reshard the other slots' p99 and slowest call during it, the MIGRATE
// calls and the longest one in the slowlog.
//
// The variables: EMQ_MOVE_JOBS, the queue's jobs (default 1M, at least
// 1000); EMQ_MOVE_ARGS, the variants instead of the default ones,
// separated by ";", each the mover's arguments or "redis-cluster" for the
// reshard (EMQ_MOVE_ARGS="--rate 0;redis-cluster": the unpaced mover and
// the reshard); EMQ_MOVE_PIPELINE, the reshard's keys per MIGRATE
// (redis-cli's --cluster-pipeline, default 10, as redis-cli's own);
// EMQ_MOVE_NOLOAD=1, no client on the moving queue; EMQ_MOVE_TIMELINE=1,
// the mover's other-queue p99 five seconds at a time.
func TestQueueMoveBench(t *testing.T) {
	if os.Getenv("EMQ_MOVE_BENCH") == "" {
		t.Skip("set EMQ_MOVE_BENCH=1 to measure moves of a 1M-job queue under load")
	}
	jobs := 1_000_000
	if v := os.Getenv("EMQ_MOVE_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("EMQ_MOVE_JOBS=%q: want a number of jobs >= 1000", v)
		}
		jobs = n
	}
	variants := []struct{ name, args string }{
		{"today (--hold-copy)", "--hold-copy"},
		{"online, default --rate", ""},
		{"online, --rate 0", "--rate 0"},
		{"online, keyspace", "--track keyspace"},
		{clusterRow, clusterVariant},
	}
	if v := os.Getenv("EMQ_MOVE_ARGS"); v != "" {
		// One variant by hand, e.g. EMQ_MOVE_ARGS="--rate 0 --max-hold 20s".
		variants = variants[:0]
		for _, args := range strings.Split(v, ";") {
			name := "online " + strings.TrimSpace(args)
			if strings.TrimSpace(args) == clusterVariant {
				name, args = clusterRow, clusterVariant
			}
			variants = append(variants, struct{ name, args string }{name, args})
		}
	}
	var rows []benchResult
	for _, v := range variants {
		t.Run(strings.ReplaceAll(v.name, " ", "_"), func(t *testing.T) {
			var r benchResult
			if v.args == clusterVariant {
				r = benchClusterReshard(t, jobs)
			} else {
				r = benchMove(t, jobs, strings.Fields(v.args))
			}
			r.name = v.name
			rows = append(rows, r)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "move of a queue of %d jobs under load (two proxies, control.poll 100ms, timeouts.hold 5s):\n", jobs)
	fmt.Fprintf(&b, "%-24s %9s %9s %9s %8s %9s %8s %22s %22s %6s\n", "mover", "move", "hold", "in hold", "TRYAGAIN", "slowest", "keys/s",
		"p99 src before/copy/hold", "p99 dst before/copy/hold", "rounds")
	for _, r := range rows {
		if r.failed != "" {
			fmt.Fprintf(&b, "%-24s failed after %v: %s\n", r.name, r.move.Round(time.Millisecond), r.failed)
			continue
		}
		if r.cluster {
			fmt.Fprintf(&b, "%-24s %9v %9s %9s %8d %9v %8.0f %22s %22s %6d\n", r.name, r.move.Round(time.Millisecond), r.hold, r.holdWork,
				r.tryagain, r.slowestCall.Round(time.Millisecond), r.rate, r.p99[0].clusterString(), r.p99[1].clusterString(), r.rounds)
			continue
		}
		fmt.Fprintf(&b, "%-24s %9v %9v %9v %8d %9v %8.0f %22s %22s %6d\n", r.name, r.move.Round(time.Millisecond), r.hold, r.holdWork,
			r.tryagain, r.slowestCall.Round(time.Millisecond), r.rate, r.p99[0].String(), r.p99[1].String(), r.rounds)
	}
	for _, r := range rows {
		if r.cluster && r.failed == "" {
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			fmt.Fprintf(&b, "%s: other slots' calls during the move: on A p99 %.1fms max %.1fms, on B p99 %.1fms max %.1fms; longest MIGRATE on A %s; ids popped by a failed claim, in no set: %d; slowest in the slowlog %s\n",
				r.name, ms(r.p99[0].during), ms(r.max[0]), ms(r.p99[1].during), ms(r.max[1]), r.longestMigrate, r.lostIDs, r.slowlog)
			continue
		}
		fmt.Fprintf(&b, "%s: longest round trip %s; slowest in the slowlog %s\n", r.name, r.longest, r.slowlog)
	}
	if len(rows) >= 3 && rows[0].failed == "" && rows[1].failed == "" && !rows[1].cluster {
		fmt.Fprintf(&b, "hold: online at the default rate %.2fx today's; p99 of other calls during the copy while served / before: source %.2fx, target %.2fx; during the hold: %.2fx, %.2fx\n",
			rows[1].holdD.Seconds()/rows[0].holdD.Seconds(), rows[1].p99[0].ratio(), rows[1].p99[1].ratio(),
			rows[1].p99[0].holdRatio(), rows[1].p99[1].holdRatio())
	}
	t.Log("\n" + b.String())
}

type benchResult struct {
	name                      string
	move, holdD               time.Duration
	hold, holdWork            string
	tryagain                  int
	slowestCall               time.Duration
	rate                      float64
	p99                       [2]p99pair // source's other queue, target's
	rounds                    int
	longest, slowlog          string
	acked                     int
	callsMoving, errorsMoving int
	failed                    string
	// The Redis Cluster row: no hold; the slowest call of each other
	// queue during the move, the longest MIGRATE, and the ids a claim
	// popped and lost while it failed.
	cluster        bool
	max            [2]time.Duration
	longestMigrate string
	lostIDs        int64
}

// p99pair is the p99 of a queue's calls before the move, during its copy
// while served, and during its hold (for today's mover the whole move).
type p99pair struct{ before, during, hold time.Duration }

func (p p99pair) String() string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("%.1f/%.1f/%.1fms", ms(p.before), ms(p.during), ms(p.hold))
}

// clusterString is String without the hold: a reshard has none.
func (p p99pair) clusterString() string {
	return fmt.Sprintf("%.1f/%.1f/-ms", float64(p.before.Microseconds())/1000, float64(p.during.Microseconds())/1000)
}

func (p p99pair) ratio() float64     { return p.during.Seconds() / max(p.before.Seconds(), 1e-9) }
func (p p99pair) holdRatio() float64 { return p.hold.Seconds() / max(p.before.Seconds(), 1e-9) }

// timedLoad loops enqueue, claim and complete on one queue through one
// proxy, recording when each call ended and how long it took.
type timedLoad struct {
	every    time.Duration // when set: enqueues only, one every this long (a ticker)
	mu       sync.Mutex
	at       []time.Time
	took     []time.Duration
	acked    []string
	tryagain int
	errs     []error
}

func (l *timedLoad) run(ctx context.Context, t *testing.T, s *moveStand, addr, q, prefix string, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	c, err := legacy.Dial(ctx, legacy.Options{Addr: addr, Map: s.m, Brand: s.m.LegacyBrand})
	if err != nil {
		l.fail(err)
		return
	}
	defer c.Close()
	l.loop(ctx, c, q, prefix, stop)
}

// queueOps are the three calls of the load: the legacy client's, or the
// same scripts sent through a cluster client (clusterQueue).
type queueOps interface {
	Enqueue(ctx context.Context, q, id, payload string) (bool, error)
	Claim(ctx context.Context, q string, leaseMs int64) (job legacy.Job, empty bool, err error)
	Complete(ctx context.Context, q, id string) (bool, error)
}

// loop runs enqueue, claim and complete on q through c until stop closes.
func (l *timedLoad) loop(ctx context.Context, c queueOps, q, prefix string, stop <-chan struct{}) {
	call := func(f func() error) bool {
		t0 := time.Now()
		err := f()
		d := time.Since(t0)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.at, l.took = append(l.at, t0.Add(d)), append(l.took, d)
		switch {
		case err == nil:
			return true
		case strings.Contains(err.Error(), "TRYAGAIN"):
			l.tryagain++
		default:
			l.errs = append(l.errs, err)
		}
		return false
	}
	var tick <-chan time.Time
	if l.every > 0 {
		tk := time.NewTicker(l.every)
		defer tk.Stop()
		tick = tk.C
	}
	for i := 0; ; i++ {
		if tick != nil {
			select {
			case <-stop:
				return
			case <-tick:
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		id := fmt.Sprintf("%s-%07d", prefix, i)
		var ok bool
		if call(func() (err error) { ok, err = c.Enqueue(ctx, q, id, "payload "+id); return }) && ok {
			l.mu.Lock()
			l.acked = append(l.acked, id)
			l.mu.Unlock()
		}
		if tick != nil {
			continue
		}
		var job legacy.Job
		var empty bool
		if call(func() (err error) { job, empty, err = c.Claim(ctx, q, 30000); return }) && !empty {
			call(func() error { _, err := c.Complete(ctx, q, job.ID); return err })
		}
	}
}

func (l *timedLoad) fail(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// window returns the p99 and the slowest of the calls that ended in [from, to).
func (l *timedLoad) window(from, to time.Time) (p99, slowest time.Duration, n int) {
	l.mu.Lock()
	var ds []time.Duration
	for i, at := range l.at {
		if !at.Before(from) && at.Before(to) {
			ds = append(ds, l.took[i])
		}
	}
	l.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100], ds[len(ds)-1], len(ds)
}

// fillStates writes jobs of queue q on c in four states, a quarter each:
// rows and the pending, active, done and delayed sets (pending at score 0,
// active and delayed an hour ahead, done at its index).
func fillStates(t *testing.T, c valkey.Client, q string, jobs int) {
	t.Helper()
	ctx := context.Background()
	states := []string{"pending", "active", "done", "delayed"}
	later := float64(time.Now().Add(time.Hour).UnixMilli())
	for lo := 0; lo < jobs; lo += 1000 {
		var cmds valkey.Commands
		for i := lo; i < min(lo+1000, jobs); i++ {
			id := fmt.Sprintf("J%08d", i)
			st := states[i%len(states)]
			score := map[string]float64{"pending": 0, "active": later, "done": float64(i), "delayed": later}[st]
			cmds = append(cmds,
				c.B().Hset().Key(legacy.JobKey(q, id)).FieldValue().FieldValue("state", st).
					FieldValue("attempts", "1").FieldValue("payload", "payload of "+id).Build(),
				c.B().Zadd().Key(legacy.Key(q, st)).ScoreMember().ScoreMember(score, id).Build())
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func benchMove(t *testing.T, jobs int, args []string) benchResult {
	s := startMoveStand(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for _, c := range []valkey.Client{s.src, s.dst} {
		must := func(k, v string) {
			if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue(k, v).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		must("slowlog-log-slower-than", "1000")
		must("slowlog-max-len", "1024")
		must("repl-diskless-sync-delay", "5") // the server's default, as in production
	}
	t0 := time.Now()
	fillStates(t, s.src, "billing", jobs)
	t.Logf("filled %d jobs in %v; load average %s", jobs, time.Since(t0), loadAvg())
	ps := []*proc{s.proxy(t, "proxy1"), s.proxy(t, "proxy2")}
	waitRegistered(t, s.src, 2)
	waitRegistered(t, s.dst, 2)

	moving, other := &timedLoad{}, [2]*timedLoad{{}, {}}
	if v := os.Getenv("EMQ_MOVE_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("EMQ_MOVE_EVERY=%q: want a duration, e.g. 2ms", v)
		}
		moving.every = d
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	noLoad := os.Getenv("EMQ_MOVE_NOLOAD") != "" // the copy rate alone: no client on the moving queue
	for i, p := range ps {
		for j := range 2 {
			if noLoad {
				break
			}
			wg.Add(1)
			go moving.run(ctx, t, s, p.listen, "billing", fmt.Sprintf("B%d%d", i, j), stop, &wg)
		}
		wg.Add(2)
		go other[0].run(ctx, t, s, p.listen, "ledger", fmt.Sprintf("L%d", i), stop, &wg) // on the source
		go other[1].run(ctx, t, s, p.listen, "quotes", fmt.Sprintf("Q%d", i), stop, &wg) // on the target
	}
	before := time.Now()
	for time.Since(before) < 5*time.Second {
		time.Sleep(100 * time.Millisecond) // the load's "before" window
	}
	srcCPU, dstCPU := nodeCPU(ctx, t, s.src), nodeCPU(ctx, t, s.dst)
	began := time.Now()
	out, err := s.run(t, append([]string{"move", "billing", "--to", "module-a"}, args...)...)
	ended := time.Now()
	t.Logf("the nodes' processor time during the move (INFO cpu): source %.2fs, target %.2fs, in %v",
		nodeCPU(ctx, t, s.src)-srcCPU, nodeCPU(ctx, t, s.dst)-dstCPU, ended.Sub(began).Round(time.Millisecond))
	t.Logf("load average after the move: %s", loadAvg())
	if err != nil {
		close(stop)
		wg.Wait()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		t.Logf("move failed: %v", err)
		return benchResult{move: ended.Sub(began), failed: lines[len(lines)-1]}
	}
	for time.Since(ended) < time.Second {
		time.Sleep(100 * time.Millisecond) // calls held by the move end after it
	}
	close(stop)
	wg.Wait()

	r := benchResult{move: ended.Sub(began)}
	r.hold = regexp.MustCompile(`held for (\S+)`).FindStringSubmatch(out)[1]
	r.holdD, _ = time.ParseDuration(r.hold)
	if m := regexp.MustCompile(`under the hold: \d+ changed keys in (\S+);`).FindStringSubmatch(out); m != nil {
		r.holdWork = m[1]
	} else if m := regexp.MustCompile(`copied under the hold \(--hold-copy\) in (\S+)`).FindStringSubmatch(out); m != nil {
		r.holdWork = m[1]
	}
	if m := regexp.MustCompile(`copied while served: (\d+) rounds`).FindStringSubmatch(out); m != nil {
		r.rounds, _ = strconv.Atoi(m[1])
	}
	keys := reportInt(t, out, `keys copied: (\d+)`)
	r.rate = float64(keys) / r.move.Seconds()
	var lrt, slow []string
	for _, m := range regexp.MustCompile(`longest round trip to (\S+): (\S+) \(([^,]+), (\d+) commands\)`).FindAllStringSubmatch(out, -1) {
		lrt = append(lrt, fmt.Sprintf("%s %s", m[1], m[2]))
	}
	for _, m := range regexp.MustCompile(`slowest command on (\S+): (.*)`).FindAllStringSubmatch(out, -1) {
		slow = append(slow, m[1]+": "+m[2])
	}
	r.longest, r.slowlog = strings.Join(lrt, ", "), strings.Join(slow, "; ")
	held := ended.Add(-r.holdD)
	for i, l := range other {
		b, _, _ := l.window(before, began)
		d, _, _ := l.window(began, held)
		h, _, _ := l.window(held, ended)
		r.p99[i] = p99pair{b, d, h}
		for _, err := range l.errs {
			t.Errorf("a client of another queue: %v", err)
		}
	}
	if os.Getenv("EMQ_MOVE_TIMELINE") != "" {
		// The other queues' p99, five seconds at a time, through the move.
		var tl strings.Builder
		for at := before; at.Before(ended); at = at.Add(5 * time.Second) {
			a, _, na := other[0].window(at, at.Add(5*time.Second))
			b, _, nb := other[1].window(at, at.Add(5*time.Second))
			fmt.Fprintf(&tl, "%+6.0fs  source %5.1fms (%d calls)  target %5.1fms (%d calls)\n", at.Sub(began).Seconds(),
				float64(a.Microseconds())/1000, na, float64(b.Microseconds())/1000, nb)
		}
		t.Logf("p99 of the other queues, 5 s windows (0 = the move's start):\n%s", tl.String())
	}
	_, r.slowestCall, r.callsMoving = moving.window(began, ended.Add(time.Second))
	r.tryagain, r.errorsMoving, r.acked = moving.tryagain, len(moving.errs), len(moving.acked)
	for _, err := range moving.errs {
		t.Errorf("a client of the moving queue: %v", err)
	}
	// Every enqueue acknowledged during the run is on the target once.
	checkLanded(t, s, nil, &workload{acked: moving.acked})
	t.Logf("mover:\n%s", out)
	t.Logf("calls on the moving queue during the move: %d, %d TRYAGAIN; enqueues acknowledged: %d", r.callsMoving, r.tryagain, r.acked)
	return r
}

// nodeCPU is the processor time a node has used (INFO cpu: used_cpu_sys +
// used_cpu_user), in seconds.
func nodeCPU(ctx context.Context, t *testing.T, c valkey.Client) float64 {
	t.Helper()
	txt, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(txt, "\r\n") {
		name, v, _ := strings.Cut(l, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("INFO cpu: %s: %v", l, err)
			}
			sum += f
		}
	}
	return sum
}
