package e2e

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestManyClientsIntegration runs 20 clients at once on one queue: each
// enqueues 200 jobs, then all of them claim and complete until the queue
// is empty. Every job is claimed exactly once across the clients, and the
// replies (as a multiset: which client got which job differs from run to
// run) and the keys are the same on both paths.
func TestManyClientsIntegration(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testManyClientsIntegration)
}

func testManyClientsIntegration(t *testing.T, server node.Server) {
	const (
		q       = "crowd"
		clients = 20
		jobs    = 200
	)
	runBoth(t, server, func(t testing.TB, tr *Transcript) {
		ctx := testCtx(t)
		cs := make([]*legacy.Client, clients)
		tr.Together("connect 20 clients", func() {
			for i := range cs {
				cs[i] = tr.Dial(fmt.Sprintf("crowd-%02d", i))
			}
		})

		tr.Together("each client enqueues 200 jobs", func() {
			errs := eachClient(cs, func(i int, c *legacy.Client) error {
				for j := range jobs {
					id := fmt.Sprintf("C%02d-%04d", i, j)
					if ok, err := c.Enqueue(ctx, q, id, "work "+id); err != nil || !ok {
						return fmt.Errorf("enqueue %s: %v %w", id, ok, err)
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})

		claimed := make([][]string, clients)
		tr.Together("all clients claim and complete until the queue is empty", func() {
			errs := eachClient(cs, func(i int, c *legacy.Client) error {
				for {
					job, empty, err := c.Claim(ctx, q, 60000)
					if err != nil || empty {
						return err
					}
					claimed[i] = append(claimed[i], job.ID)
					if ok, err := c.Complete(ctx, q, job.ID); err != nil || !ok {
						return fmt.Errorf("complete %s: %v %w", job.ID, ok, err)
					}
				}
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
		seen := map[string]int{}
		for _, ids := range claimed {
			for _, id := range ids {
				seen[id]++
			}
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("%s path: job %s claimed %d times", tr.Path.Name, id, n)
			}
		}
		if len(seen) != clients*jobs {
			t.Errorf("%s path: %d distinct jobs claimed, want %d", tr.Path.Name, len(seen), clients*jobs)
		}
		tr.Step("stats", func() { want(t, [6]int64{0, 0, 0, clients * jobs, 0, 0})(cs[0].Stats(ctx, q)) })
	})
}

// eachClient runs fn for every client at once and returns their errors.
func eachClient(cs []*legacy.Client, fn func(i int, c *legacy.Client) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = fn(i, c) })
	}
	wg.Wait()
	return errs
}

// TestReconnectIntegration reconnects in the middle of a session: the
// client's boot commands and fence run again on the new connection and the
// session continues where it was (the lease taken before is completed
// after). Through the proxy, the proxy's own upstream connection is also
// dropped (CLIENT KILL on the module node): the proxy reconnects, runs its
// upstream fence again before carrying a byte, and the client does not
// notice. (On the scripts path that step has nothing to drop: the client's
// connection is the node's only one, and killing it under a client that
// never retries may fail the next call, which the scenario does not test.)
func TestReconnectIntegration(t *testing.T) { node.EachServer(t, testReconnectIntegration) }

func testReconnectIntegration(t *testing.T, server node.Server) {
	const q = "flaky"
	runBoth(t, server, func(t testing.TB, tr *Transcript) {
		ctx := testCtx(t)
		var c *legacy.Client
		tr.Step("connect, enqueue, claim", func() {
			c = tr.Dial("flaky-worker")
			want(t, true)(c.Enqueue(ctx, q, "R1", "first"))
			want(t, true)(c.Enqueue(ctx, q, "R2", "second"))
			claims(t, legacy.Job{ID: "R1", Payload: "first", Attempts: 1})(c.Claim(ctx, q, 30000))
		})

		fences := c.Fences()
		tr.Step("reconnect", func() {
			if err := c.Reconnect(ctx); err != nil {
				t.Fatal(err)
			}
		})
		if c.Fences() <= fences {
			t.Errorf("%s path: the fence did not run again on reconnect (%d fences before, %d after)", tr.Path.Name, fences, c.Fences())
		}
		if s := lastStep(tr); len(s.Calls) < 2 || s.Calls[0].Op != "boot" || s.Calls[1].Op != "fence" {
			t.Errorf("%s path: a reconnect must send the boot commands, then the fence; it sent %v", tr.Path.Name, s.Calls)
		}

		tr.Step("the session continues", func() {
			want(t, true)(c.Complete(ctx, q, "R1"))
			claims(t, legacy.Job{ID: "R2", Payload: "second", Attempts: 1})(c.Claim(ctx, q, 30000))
		})

		tr.Step("drop the proxy's upstream connection", func() {
			if tr.Path.Proxy == nil {
				return
			}
			up := tr.Path.UpstreamFences()
			killed, err := tr.Path.Direct.Do(ctx, tr.Path.Direct.B().ClientKill().TypeNormal().SkipmeYes().Build()).AsInt64()
			if err != nil || killed < 1 {
				t.Fatalf("CLIENT KILL on the module node: killed %d, err %v", killed, err)
			}
			if err := WaitFor(ctx, func() bool { return tr.Path.UpstreamFences() > up && tr.Path.Proxy.Ready() }); err != nil {
				t.Fatalf("the proxy never reconnected and fenced its upstream again: %v", err)
			}
		})

		tr.Step("the session still continues", func() {
			want(t, true)(c.Complete(ctx, q, "R2"))
			claimsNothing(t)(c.Claim(ctx, q, 30000))
			want(t, [6]int64{0, 0, 0, 2, 0, 0})(c.Stats(ctx, q))
		})
	})
}
