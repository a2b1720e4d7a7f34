package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"

	"github.com/emqproxy/emqproxy/stand/node"
)

// Soak sizes: EMQ_SOAK_JOBS overrides the number of jobs; -short runs a
// tenth of the default.
const (
	soakClients     = 20
	soakDefaultJobs = 20000
	soakEnv         = "EMQ_SOAK_JOBS"
)

func soakJobs(t *testing.T) int {
	if v := os.Getenv(soakEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < soakClients {
			t.Fatalf("%s=%q: want an integer of at least %d", soakEnv, v, soakClients)
		}
		return n
	}
	if testing.Short() {
		return soakDefaultJobs / 10
	}
	return soakDefaultJobs
}

// TestSoakIntegration runs 20 clients over 20,000 jobs on each path:
// every client enqueues its share while it claims from the shared queue
// and completes, fails (to delayed, or to dead and then retries) what it
// claimed, and reconnects at random every few hundred calls. At the end no
// job is lost (every one is done, once) and none was duplicated (no claim
// ever answered a job another client held, and each job completed once).
func TestSoakIntegration(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testSoakIntegration)
}

func testSoakIntegration(t *testing.T, server node.Server) {
	jobs := soakJobs(t)
	m := LoadMap(t)
	t.Run(ScriptsPath, func(t *testing.T) { soak(t, StartScripts(t, server, m), jobs) })
	t.Run(ProxyPath, func(t *testing.T) {
		p := StartProxied(t, server, m)
		soak(t, p, jobs)
		noLuaWrites(t, &Transcript{Path: p, EndStats: commandStats(t, p.Direct)})
	})
}

// soakRun is the shared state of one soak run.
type soakRun struct {
	q          string
	total      int64
	held       sync.Map // job id -> client holding its lease
	completed  sync.Map // job id -> true
	done       atomic.Int64
	calls      atomic.Int64
	reconnects atomic.Int64
	failures   atomic.Int64
}

func soak(t *testing.T, p *Path, jobs int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := &soakRun{q: "soak", total: int64(jobs - jobs%soakClients)}
	cs := make([]*legacy.Client, soakClients)
	for i := range cs {
		c, err := legacy.Dial(ctx, legacy.Options{Addr: p.Addr, Map: p.Map, Brand: p.Map.LegacyBrand, ClientName: fmt.Sprintf("soak-%02d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		cs[i] = c
	}
	start := time.Now()
	errs := eachClient(cs, func(i int, c *legacy.Client) error {
		err := r.worker(ctx, i, c)
		if err != nil {
			cancel() // stop the others
		}
		return err
	})
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%s path: %v", p.Name, err)
	}
	t.Logf("%s path: %d jobs, %d clients, %d calls, %d failures, %d reconnects in %v (%.0f calls/s)",
		p.Name, r.total, soakClients, r.calls.Load(), r.failures.Load(), r.reconnects.Load(),
		elapsed.Round(time.Millisecond), float64(r.calls.Load())/elapsed.Seconds())

	// Nothing lost, nothing duplicated: every job done exactly once, in
	// the done set and nowhere else.
	if n := r.done.Load(); n != r.total {
		t.Errorf("%s path: %d jobs completed, want %d", p.Name, n, r.total)
	}
	snap, err := ReadKeys(ctx, p.Direct)
	if err != nil {
		t.Fatal(err)
	}
	done := snap[legacy.Key(r.q, "done")]
	if int64(len(done.Members)) != r.total {
		t.Errorf("%s path: the done set holds %d jobs, want %d", p.Name, len(done.Members), r.total)
	}
	rows := 0
	for _, name := range snap.Names() {
		k := snap[name]
		switch {
		case strings.HasPrefix(name, legacy.Key(r.q, "job:")):
			rows++
			id := strings.TrimPrefix(name, legacy.Key(r.q, "job:"))
			if _, ok := r.completed.Load(id); !ok || k.Hash["state"] != "done" {
				t.Errorf("%s path: row %s = %s, completed %v", p.Name, name, k, ok)
			}
			if epoch := k.Hash[LeaseEpoch]; epoch != p.RunID {
				t.Errorf("%s path: row %s has lease_epoch %q, want %q", p.Name, name, epoch, p.RunID)
			}
		case name != legacy.Key(r.q, "done"):
			t.Errorf("%s path: key %s = %s left over", p.Name, name, k)
		}
	}
	if int64(rows) != r.total {
		t.Errorf("%s path: %d rows, want %d", p.Name, rows, r.total)
	}
	want(t, [6]int64{0, 0, 0, r.total, 0, 0})(cs[0].Stats(ctx, r.q))
}

// worker is one client of the soak: it enqueues its share one job per
// round, claims, and completes (75%), fails to delayed with no backoff
// (15%, promoted when the queue runs dry) or fails to dead and retries
// (10%); every 200 to 400 calls it reconnects.
func (r *soakRun) worker(ctx context.Context, i int, c *legacy.Client) error {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	share := int(r.total) / soakClients
	next := 0
	calls := 0
	reconnectAt := 200 + rng.IntN(200)
	count := func(n int) { calls += n; r.calls.Add(int64(n)) }
	for r.done.Load() < r.total {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		if calls >= reconnectAt {
			if err := c.Reconnect(ctx); err != nil {
				return fmt.Errorf("client %d: reconnect: %w", i, err)
			}
			r.reconnects.Add(1)
			reconnectAt = calls + 200 + rng.IntN(200)
		}
		if next < share {
			id := fmt.Sprintf("S%02d-%06d", i, next)
			if ok, err := c.Enqueue(ctx, r.q, id, "soak "+id); err != nil || !ok {
				return fmt.Errorf("client %d: enqueue %s: %v %w", i, id, ok, err)
			}
			next++
			count(1)
		}
		job, empty, err := c.Claim(ctx, r.q, 60000)
		count(2) // the pause read and the script
		if err != nil {
			return fmt.Errorf("client %d: claim: %w", i, err)
		}
		if empty {
			if _, err := c.Promote(ctx, r.q, 100); err != nil {
				return fmt.Errorf("client %d: promote: %w", i, err)
			}
			count(1)
			continue
		}
		if other, dup := r.held.LoadOrStore(job.ID, i); dup {
			return fmt.Errorf("client %d: claimed %s, which client %d holds", i, job.ID, other)
		}
		if _, ok := r.completed.Load(job.ID); ok {
			return fmt.Errorf("client %d: claimed %s, which was completed already", i, job.ID)
		}
		r.held.Delete(job.ID) // released before the call that ends the lease
		switch n := rng.IntN(100); {
		case n < 75:
			if ok, err := c.Complete(ctx, r.q, job.ID); err != nil || !ok {
				return fmt.Errorf("client %d: complete %s: %v %w", i, job.ID, ok, err)
			}
			count(1)
			if _, again := r.completed.LoadOrStore(job.ID, true); again {
				return fmt.Errorf("client %d: %s completed twice", i, job.ID)
			}
			r.done.Add(1)
		case n < 90:
			if at, err := c.Fail(ctx, r.q, job.ID, "soak: try again", 1<<40, 0); err != nil || at <= 0 {
				return fmt.Errorf("client %d: fail %s to delayed: %d %w", i, job.ID, at, err)
			}
			count(1)
			r.failures.Add(1)
		default:
			if at, err := c.Fail(ctx, r.q, job.ID, "soak: fatal", 1, 0); err != nil || at != 0 {
				return fmt.Errorf("client %d: fail %s to dead: %d %w", i, job.ID, at, err)
			}
			if ok, err := c.Retry(ctx, r.q, job.ID); err != nil || !ok {
				return fmt.Errorf("client %d: retry %s: %v %w", i, job.ID, ok, err)
			}
			count(2)
			r.failures.Add(1)
		}
	}
	return nil
}
