package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// clusterVariant is the name EMQ_MOVE_ARGS gives the Redis Cluster
// resharding among its variants, and the row's name in the table.
const (
	clusterVariant = "redis-cluster"
	clusterRow     = "redis cluster reshard"
)

// The queues of the cluster stand. redis-cli --cluster reshard moves the
// lowest-numbered slots of the source, so node A owns the slots from
// billing's up (12682..16383) and node B the ones below: moving one slot
// from A moves billing's. The other queues were picked for their slots:
// invoices (13262) stays on A, quotes (3378) is on B.
const (
	clusterMoving = "billing"
	clusterOnA    = "invoices"
	clusterOnB    = "quotes"
)

// clusterScripts are the load's scripts, the stand's bodies (EVALSHA, EVAL
// after NOSCRIPT: the target of an ASK has not seen them).
var clusterScripts = struct{ enqueue, claim, complete *valkey.Lua }{
	valkey.NewLuaScript(string(scripts.Body(legacy.ScriptEnqueue))),
	valkey.NewLuaScript(string(scripts.Body(legacy.ScriptClaim))),
	valkey.NewLuaScript(string(scripts.Body(legacy.ScriptComplete))),
}

// clusterQueue sends the load's calls as the legacy client does (the same
// scripts and keys, the pause read before a claim) through a valkey-go
// cluster client, which follows MOVED and ASK. TRYAGAIN reaches the caller,
// as it does through the proxy.
type clusterQueue struct{ c valkey.Client }

func (q clusterQueue) Enqueue(ctx context.Context, name, id, payload string) (bool, error) {
	n, err := clusterScripts.enqueue.Exec(ctx, q.c, []string{legacy.JobKey(name, id), legacy.Key(name, "pending")}, []string{id, payload}).AsInt64()
	return n == 1, err
}

func (q clusterQueue) Claim(ctx context.Context, name string, leaseMs int64) (legacy.Job, bool, error) {
	paused, err := q.c.Do(ctx, q.c.B().Exists().Key(legacy.Key(name, "paused")).Build()).AsInt64()
	if err != nil || paused == 1 {
		return legacy.Job{}, paused == 1, err
	}
	vs, err := clusterScripts.claim.Exec(ctx, q.c, []string{legacy.Key(name, "pending"), legacy.Key(name, "active")},
		[]string{strconv.FormatInt(leaseMs, 10)}).ToArray()
	if err != nil {
		return legacy.Job{}, false, err
	}
	if len(vs) == 0 {
		return legacy.Job{}, true, nil
	}
	if len(vs) != 3 {
		return legacy.Job{}, false, fmt.Errorf("claim answered %d elements", len(vs))
	}
	var j legacy.Job
	if j.ID, err = vs[0].ToString(); err == nil {
		if j.Payload, err = vs[1].ToString(); err == nil {
			j.Attempts, err = vs[2].AsInt64()
		}
	}
	return j, false, err
}

func (q clusterQueue) Complete(ctx context.Context, name, id string) (bool, error) {
	n, err := clusterScripts.complete.Exec(ctx, q.c, []string{legacy.Key(name, "active"), legacy.JobKey(name, id), legacy.Key(name, "done")}, []string{id}).AsInt64()
	return n == 1, err
}

// clusterNode is one redis-server in cluster mode with a client to it
// alone (admin commands, counts).
type clusterNode struct {
	n  *node.Node
	c  valkey.Client
	id string
}

func startClusterNode(t *testing.T) *clusterNode {
	t.Helper()
	n := node.StartT(t, node.Options{Role: node.Bare, Args: []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
	}})
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cn := &clusterNode{n: n, c: c}
	cn.id = cn.str(t, "CLUSTER", "MYID")
	return cn
}

func (cn *clusterNode) do(args ...string) valkey.ValkeyResult {
	return cn.c.Do(context.Background(), cn.c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
}

func (cn *clusterNode) str(t *testing.T, args ...string) string {
	t.Helper()
	s, err := cn.do(args...).ToString()
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), cn.n.Addr, err)
	}
	return s
}

func (cn *clusterNode) int(t *testing.T, args ...string) int64 {
	t.Helper()
	n, err := cn.do(args...).AsInt64()
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), cn.n.Addr, err)
	}
	return n
}

// clusterClient is a valkey-go cluster client of the stand (topology from
// either node).
func clusterClient(t *testing.T, a, b *clusterNode) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{a.n.Addr, b.n.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// redisCLI runs redis-cli (Debian's, beside the stand's redis-server).
func redisCLI(ctx context.Context, args ...string) (string, error) {
	bin, err := exec.LookPath("redis-cli")
	if err != nil {
		bin = "/usr/bin/redis-cli"
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// loadAvg is the machine's load average as /proc/loadavg says it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// benchClusterReshard measures what TestQueueMoveBench measures for the
// mover, for Redis Cluster's own way of moving the same data: two
// redis-server nodes in cluster mode, the queue's slot on node A, the same
// rows and sets (fillStates), the same load (enqueue, claim, complete with
// the stand's scripts: four clients on the moving queue, two on a queue of
// each node, each a valkey-go cluster client), and the slot moved to B by
// redis-cli --cluster reshard (SETSLOT IMPORTING/MIGRATING, MIGRATE of
// EMQ_MOVE_PIPELINE keys at a time, default redis-cli's 10, SETSLOT NODE).
// Every key must arrive: the slot's key count on B is the filled rows, the
// four sets and the rows the load added, and A keeps none.
func benchClusterReshard(t *testing.T, jobs int) benchResult {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	pipeline := "10"
	if v := os.Getenv("EMQ_MOVE_PIPELINE"); v != "" {
		pipeline = v
	}
	a, b := startClusterNode(t), startClusterNode(t)
	slot := a.int(t, "CLUSTER", "KEYSLOT", legacy.Key(clusterMoving, "pending"))
	if s := a.int(t, "CLUSTER", "KEYSLOT", legacy.Key(clusterOnA, "pending")); s <= slot {
		t.Fatalf("queue %s hashes to slot %d, not above %s's %d", clusterOnA, s, clusterMoving, slot)
	}
	if s := a.int(t, "CLUSTER", "KEYSLOT", legacy.Key(clusterOnB, "pending")); s >= slot {
		t.Fatalf("queue %s hashes to slot %d, not below %s's %d", clusterOnB, s, clusterMoving, slot)
	}
	for i, cn := range []*clusterNode{a, b} {
		for _, cmd := range [][]string{
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
			{"CONFIG", "SET", "slowlog-log-slower-than", "1000"},
			{"CONFIG", "SET", "slowlog-max-len", "200000"}, // every MIGRATE over 1 ms, not the last 1024
		} {
			cn.str(t, cmd...)
		}
	}
	a.str(t, "CLUSTER", "ADDSLOTSRANGE", strconv.FormatInt(slot, 10), "16383")
	b.str(t, "CLUSTER", "ADDSLOTSRANGE", "0", strconv.FormatInt(slot-1, 10))
	a.str(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(b.n.Port))
	// redis-cli refuses to reshard until every node agrees on the slots.
	var check string
	for deadline := time.Now().Add(60 * time.Second); ; {
		var err error
		check, err = redisCLI(ctx, "--cluster", "check", a.n.Addr)
		if err == nil && strings.Contains(check, "[OK] All nodes agree about slots configuration.") &&
			strings.Contains(check, "[OK] All 16384 slots covered.") &&
			strings.Contains(a.str(t, "CLUSTER", "INFO"), "cluster_state:ok") &&
			strings.Contains(b.str(t, "CLUSTER", "INFO"), "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two nodes do not form a cluster: %v\n%s", err, check)
		}
		time.Sleep(100 * time.Millisecond)
	}

	fill := clusterClient(t, a, b)
	t0 := time.Now()
	fillStates(t, fill, clusterMoving, jobs)
	filled := a.int(t, "CLUSTER", "COUNTKEYSINSLOT", strconv.FormatInt(slot, 10))
	t.Logf("filled %d jobs (%d keys in slot %d) in %v; load average %s", jobs, filled, slot, time.Since(t0), loadAvg())

	moving, other := &timedLoad{}, [2]*timedLoad{{}, {}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := func(l *timedLoad, q, prefix string) {
		c := clusterClient(t, a, b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.loop(ctx, clusterQueue{c}, q, prefix, stop)
		}()
	}
	for i := range 2 { // as many clients as two proxies carry in benchMove
		if os.Getenv("EMQ_MOVE_NOLOAD") == "" {
			start(moving, clusterMoving, fmt.Sprintf("B%d0", i))
			start(moving, clusterMoving, fmt.Sprintf("B%d1", i))
		}
		start(other[0], clusterOnA, fmt.Sprintf("I%d", i))
		start(other[1], clusterOnB, fmt.Sprintf("Q%d", i))
	}
	before := time.Now()
	for time.Since(before) < 5*time.Second {
		time.Sleep(100 * time.Millisecond) // the load's "before" window
	}
	for _, cn := range []*clusterNode{a, b} {
		cn.str(t, "SLOWLOG", "RESET")
		cn.str(t, "CONFIG", "RESETSTAT")
	}
	loadBefore := loadAvg()
	began := time.Now()
	out, err := redisCLI(ctx, "--cluster", "reshard", a.n.Addr, "--cluster-from", a.id, "--cluster-to", b.id,
		"--cluster-slots", "1", "--cluster-yes", "--cluster-pipeline", pipeline)
	ended := time.Now()
	if err != nil {
		close(stop)
		wg.Wait()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		t.Logf("redis-cli --cluster reshard: %v\n%s", err, out)
		return benchResult{move: ended.Sub(began), failed: lines[len(lines)-1]}
	}
	for time.Since(ended) < time.Second {
		time.Sleep(100 * time.Millisecond) // as benchMove: calls in flight end
	}
	close(stop)
	wg.Wait()
	t.Logf("redis-cli --cluster reshard took %v (load average %s before, %s after); its last lines:\n%s",
		ended.Sub(began).Round(time.Millisecond), loadBefore, loadAvg(), lastLines(out, 4))

	r := benchResult{move: ended.Sub(began), cluster: true, hold: "-", holdWork: "-", longest: "-"}
	// Every key arrived: the slot is B's, B holds the filled keys and the
	// rows the load added, A holds none.
	ss := strconv.FormatInt(slot, 10)
	for _, cn := range []*clusterNode{a, b} {
		if nodes := cn.str(t, "CLUSTER", "NODES"); !owns(nodes, b.id, slot) {
			t.Errorf("%s does not see B own slot %s after the reshard:\n%s", cn.n.Addr, ss, nodes)
		}
	}
	onA, onB := a.int(t, "CLUSTER", "COUNTKEYSINSLOT", ss), b.int(t, "CLUSTER", "COUNTKEYSINSLOT", ss)
	var sets []string
	for _, role := range []string{"pending", "active", "done", "delayed", "dead", "paused"} {
		if b.int(t, "EXISTS", legacy.Key(clusterMoving, role)) == 1 {
			sets = append(sets, role)
		}
	}
	want := int64(jobs + len(moving.acked) + 4)
	if onA != 0 || onB != want || len(sets) != 4 {
		t.Errorf("slot %s after the reshard: %d keys on A, %d on B (want 0 and %d: %d rows filled, %d enqueued by the load, 4 sets); sets on B: %v",
			ss, onA, onB, want, jobs, len(moving.acked), sets)
	}
	var cmds valkey.Commands
	for _, id := range moving.acked {
		cmds = append(cmds, b.c.B().Exists().Key(legacy.JobKey(clusterMoving, id)).Build())
	}
	missing := 0
	for _, res := range b.c.DoMulti(ctx, cmds...) {
		if n, err := res.AsInt64(); err != nil || n != 1 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the %d rows the load enqueued are not on B", missing, len(moving.acked))
	}
	// The ids the sets hold against the rows: a claim whose script meets a
	// row already moved fails after its ZPOPMIN ("Script attempted to
	// access a non local key"), and the popped id is in no set any more.
	var ids int64
	for _, role := range []string{"pending", "active", "done", "delayed", "dead"} {
		ids += b.int(t, "ZCARD", legacy.Key(clusterMoving, role))
	}
	r.lostIDs = int64(jobs+len(moving.acked)) - ids
	r.rate = float64(onB) / r.move.Seconds()

	// MIGRATE calls (the "rounds") and the longest ones in the slowlogs.
	if st, err := node.CommandStats(ctx, a.c); err == nil {
		r.rounds = int(st["migrate"])
	} else {
		t.Error(err)
	}
	var slow []string
	for _, cn := range []struct {
		name string
		n    *clusterNode
	}{{"A", a}, {"B", b}} {
		top, topMigrate := slowest(t, cn.n)
		slow = append(slow, fmt.Sprintf("%s: %s", cn.name, top))
		if cn.n == a {
			r.longestMigrate = topMigrate
		}
	}
	r.slowlog = strings.Join(slow, "; ")

	for i, l := range other {
		b, _, _ := l.window(before, began)
		d, mx, _ := l.window(began, ended)
		r.p99[i] = p99pair{before: b, during: d}
		r.max[i] = mx
		for _, err := range l.errs {
			t.Errorf("a client of another queue: %v", err)
		}
	}
	_, r.slowestCall, r.callsMoving = moving.window(began, ended.Add(time.Second))
	r.tryagain, r.errorsMoving, r.acked = moving.tryagain, len(moving.errs), len(moving.acked)
	kinds := map[string]int{}
	for _, err := range moving.errs {
		kinds[errKind(err)]++
	}
	t.Logf("calls on the moving queue during the reshard: %d, %d TRYAGAIN, other errors %v; enqueues acknowledged: %d; ids in no set: %d",
		r.callsMoving, r.tryagain, kinds, r.acked, r.lostIDs)
	return r
}

// owns reports whether CLUSTER NODES text has the node id serve slot.
func owns(nodes, id string, slot int64) bool {
	nodes = strings.TrimPrefix(nodes, "txt:") // a RESP3 verbatim string
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != id {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			l, err1 := strconv.ParseInt(lo, 10, 64)
			h, err2 := strconv.ParseInt(hi, 10, 64)
			if err1 == nil && err2 == nil && l <= slot && slot <= h {
				return true
			}
		}
	}
	return false
}

// errKind is an error's text up to its first colon, to count errors by
// kind.
func errKind(err error) string {
	s := err.Error()
	if i := strings.Index(s, ":"); i > 0 && i < 60 {
		s = s[:i]
	}
	return s[:min(len(s), 60)]
}

// slowest reads a node's slowlog: its slowest command, and its slowest
// MIGRATE ("none" when no MIGRATE took over slowlog-log-slower-than).
func slowest(t *testing.T, cn *clusterNode) (top, migrate string) {
	t.Helper()
	entries, err := cn.do("SLOWLOG", "GET", "-1").ToArray()
	if err != nil {
		t.Fatalf("SLOWLOG GET on %s: %v", cn.n.Addr, err)
	}
	var topD, migD int64 = -1, -1
	var topCmd string
	migrates := 0
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 4 {
			continue
		}
		us, _ := f[2].AsInt64()
		args, _ := f[3].AsStrSlice()
		if len(args) == 0 {
			continue
		}
		name := strings.ToUpper(args[0])
		if us > topD {
			topD, topCmd = us, name
		}
		if name == "MIGRATE" {
			migrates++
			if us > migD {
				migD = us
			}
		}
	}
	ms := func(us int64) string {
		return (time.Duration(us) * time.Microsecond).Round(10 * time.Microsecond).String()
	}
	top, migrate = "empty", "none over 1ms"
	if topD >= 0 {
		top = fmt.Sprintf("%s %s (%d entries over 1ms)", topCmd, ms(topD), len(entries))
	}
	if migD >= 0 {
		migrate = fmt.Sprintf("%s (%d MIGRATEs over 1ms)", ms(migD), migrates)
	}
	return top, migrate
}

// lastLines returns the last n lines of s, each cut at 160 bytes (redis-cli
// prints a dot per key moved).
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	for i, l := range lines {
		if len(l) > 160 {
			lines[i] = l[:160] + fmt.Sprintf("... (%d bytes)", len(l))
		}
	}
	return strings.Join(lines, "\n")
}
