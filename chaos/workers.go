package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
)

// Worker parameters.
const (
	// CallTimeout is each worker call's deadline.
	CallTimeout = 2 * time.Second
	// CallBound is the longest a call may take before the checker calls
	// it hung: its deadline plus a reconnect's dial and fence (1 s each
	// way) and the scheduling of a loaded machine.
	CallBound = 6 * time.Second
	// LeaseMs is the lease of every claim and extend.
	LeaseMs = 2000
	// MaxAttempts and BackoffMs are what fail and reap are told.
	MaxAttempts = 3
	BackoffMs   = 100
)

// worker is one legacy worker: one wire-4 client through one sidecar.
type worker struct {
	name    string
	queues  []string
	sidecar *Sidecar
	h       *History
	rng     *rand.Rand
	c       *legacy.Client
	opts    legacy.Options
	seq     int
	retryID []pendingEnqueue // enqueues that errored, sent again with the same id
	dead    []string         // queue/id of jobs this worker saw die
}

type pendingEnqueue struct {
	q, id, payload string
	tries          int
}

func newWorker(f *Fleet, h *History, queues []string, i int, seed uint64) *worker {
	sc := f.Sidecars[i%len(f.Sidecars)]
	return &worker{
		name: fmt.Sprintf("w%02d", i+1), sidecar: sc, h: h, queues: queues,
		rng: rand.New(rand.NewPCG(seed, uint64(1000+i))),
		opts: legacy.Options{Addr: sc.Relay.Listen, Map: f.Map, Brand: f.Map.LegacyBrand,
			DialTimeout: time.Second, ClientName: fmt.Sprintf("chaos-w%02d", i+1)},
	}
}

// connect dials (or reconnects) the worker's client, as a worker whose
// connection failed would, bounded by the deadline.
func (w *worker) connect(stop <-chan struct{}) bool {
	for attempt := 0; attempt < 200; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		var err error
		if w.c == nil {
			w.c, err = legacy.Dial(ctx, w.opts)
		} else {
			err = w.c.Reconnect(ctx)
		}
		cancel()
		if err == nil {
			return true
		}
		if w.c == nil || attempt%20 == 0 {
			w.h.Add(Event{Kind: KindInfo, Proc: w.name, Sidecar: w.sidecar.N, Detail: "connect: " + err.Error()})
		}
		select {
		case <-stop:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// call records one call's invoke and end around f.
func (w *worker) call(inv Event, f func(ctx context.Context) (Event, error)) (Event, bool) {
	inv.Kind, inv.Proc, inv.Sidecar = KindInvoke, w.name, w.sidecar.N
	inv.Call = w.h.NextCall()
	w.h.Add(inv)
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	end, err := f(ctx)
	cancel()
	end.Call, end.Proc = inv.Call, w.name
	if err != nil {
		end.Kind, end.Err = KindErr, err.Error()
		end.Timeout = errors.Is(err, context.DeadlineExceeded)
		w.h.Add(end)
		return end, false
	}
	end.Kind = KindOK
	w.h.Add(end)
	return end, true
}

// run is the worker's loop until stop is closed: enqueue, claim and then
// complete, fail or extend, reap, promote, retry.
func (w *worker) run(stop <-chan struct{}) {
	if !w.connect(stop) {
		return
	}
	defer w.c.Close()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if w.c.Stopped() != nil {
			// The fence stopped the client (the sidecar answered that its
			// upstream is not fenced): a worker reconnects.
			w.h.Add(Event{Kind: KindInfo, Proc: w.name, Detail: "fence stopped the client: " + w.c.Stopped().Error()})
			if !w.connect(stop) {
				return
			}
		}
		q := w.queues[w.rng.IntN(len(w.queues))]
		switch r := w.rng.Float64(); {
		case r < 0.35:
			w.enqueue(q)
		case r < 0.75:
			w.claim(q)
		case r < 0.85:
			w.call(Event{Op: OpReap, Queue: q}, func(ctx context.Context) (Event, error) {
				n, err := w.c.Reap(ctx, q, 50, MaxAttempts)
				return Event{Int: n}, err
			})
		case r < 0.95:
			w.call(Event{Op: OpPromote, Queue: q}, func(ctx context.Context) (Event, error) {
				n, err := w.c.Promote(ctx, q, 50)
				return Event{Int: n}, err
			})
		default:
			w.retryDead()
		}
	}
}

func (w *worker) enqueue(q string) {
	var p pendingEnqueue
	if len(w.retryID) > 0 && w.rng.IntN(2) == 0 {
		p, w.retryID = w.retryID[0], w.retryID[1:]
	} else {
		w.seq++
		id := fmt.Sprintf("%s-%s-%06d", q, w.name, w.seq)
		p = pendingEnqueue{q: q, id: id, payload: fmt.Sprintf("enqueuer=%s seq=%d queue=%s id=%s", w.name, w.seq, q, id)}
	}
	_, ok := w.call(Event{Op: OpEnqueue, Queue: p.q, ID: p.id, Payload: p.payload}, func(ctx context.Context) (Event, error) {
		created, err := w.c.Enqueue(ctx, p.q, p.id, p.payload)
		return Event{Int: b2i(created)}, err
	})
	if !ok && p.tries < 3 {
		p.tries++
		w.retryID = append(w.retryID, p)
	}
}

func (w *worker) claim(q string) {
	end, ok := w.call(Event{Op: OpClaim, Queue: q, Lease: LeaseMs}, func(ctx context.Context) (Event, error) {
		job, empty, err := w.c.Claim(ctx, q, LeaseMs)
		if err != nil || empty {
			return Event{Empty: empty}, err
		}
		return Event{Job: &Job{ID: job.ID, Payload: job.Payload, Attempts: job.Attempts}}, nil
	})
	if !ok || end.Job == nil {
		return
	}
	id := end.Job.ID
	r := w.rng.Float64()
	if r >= 0.8 {
		w.call(Event{Op: OpExtend, Queue: q, ID: id, Lease: LeaseMs}, func(ctx context.Context) (Event, error) {
			d, err := w.c.Extend(ctx, q, id, LeaseMs)
			return Event{Int: d}, err
		})
	}
	if r < 0.2 {
		end, ok := w.call(Event{Op: OpFail, Queue: q, ID: id}, func(ctx context.Context) (Event, error) {
			n, err := w.c.Fail(ctx, q, id, "chaos", MaxAttempts, BackoffMs)
			return Event{Int: n}, err
		})
		if ok && end.Int == 0 {
			w.dead = append(w.dead, q+"/"+id)
		}
		return
	}
	w.call(Event{Op: OpComplete, Queue: q, ID: id}, func(ctx context.Context) (Event, error) {
		done, err := w.c.Complete(ctx, q, id)
		return Event{Int: b2i(done)}, err
	})
}

func (w *worker) retryDead() {
	if len(w.dead) == 0 {
		return
	}
	qid := w.dead[0]
	w.dead = w.dead[1:]
	q, id, _ := strings.Cut(qid, "/")
	w.call(Event{Op: OpRetry, Queue: q, ID: id}, func(ctx context.Context) (Event, error) {
		ok, err := w.c.Retry(ctx, q, id)
		return Event{Int: b2i(ok)}, err
	})
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// drain empties the queues once the faults have stopped: it promotes the
// delayed jobs, reaps the expired leases, claims and completes what is
// pending, until no queue has a pending, delayed or active job or the
// deadline passes. Dead jobs stay dead: failed by a worker, they are a
// final state. Its calls are in the history like the workers'.
func drain(f *Fleet, h *History, queues []string, deadline time.Time) error {
	var wg sync.WaitGroup
	errs := make([]error, len(queues))
	for i, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{name: "drain-" + q, sidecar: f.Sidecars[i%len(f.Sidecars)], h: h,
				opts: legacy.Options{Addr: f.Sidecars[i%len(f.Sidecars)].Listen, Map: f.Map, Brand: f.Map.LegacyBrand, DialTimeout: time.Second}}
			stop := make(chan struct{})
			time.AfterFunc(time.Until(deadline), func() { close(stop) })
			if !w.connect(stop) {
				errs[i] = fmt.Errorf("drain %s: no connection", q)
				return
			}
			defer w.c.Close()
			for time.Now().Before(deadline) {
				var st [6]int64
				_, ok := w.call(Event{Op: "stats", Queue: q}, func(ctx context.Context) (Event, error) {
					var err error
					st, err = w.c.Stats(ctx, q)
					return Event{Detail: fmt.Sprint(st[:5])}, err
				})
				if !ok {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				pending, delayed, active := st[0], st[1], st[2]
				if pending+delayed+active == 0 {
					return
				}
				if delayed > 0 {
					w.call(Event{Op: OpPromote, Queue: q}, func(ctx context.Context) (Event, error) {
						n, err := w.c.Promote(ctx, q, 1000)
						return Event{Int: n}, err
					})
				}
				if active > 0 {
					w.call(Event{Op: OpReap, Queue: q}, func(ctx context.Context) (Event, error) {
						n, err := w.c.Reap(ctx, q, 1000, 1000)
						return Event{Int: n}, err
					})
				}
				for range min(pending, 200) {
					end, ok := w.call(Event{Op: OpClaim, Queue: q, Lease: LeaseMs}, func(ctx context.Context) (Event, error) {
						job, empty, err := w.c.Claim(ctx, q, LeaseMs)
						if err != nil || empty {
							return Event{Empty: empty}, err
						}
						return Event{Job: &Job{ID: job.ID, Payload: job.Payload, Attempts: job.Attempts}}, nil
					})
					if !ok || end.Job == nil {
						break
					}
					id := end.Job.ID
					w.call(Event{Op: OpComplete, Queue: q, ID: id}, func(ctx context.Context) (Event, error) {
						done, err := w.c.Complete(ctx, q, id)
						return Event{Int: b2i(done)}, err
					})
				}
				if pending == 0 && delayed == 0 {
					time.Sleep(100 * time.Millisecond) // leases run out
				}
			}
			errs[i] = fmt.Errorf("drain %s: jobs left at the deadline", q)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readQueue reads every job of queue q on the node at addr: each set's
// members and each row's state and payload.
func readQueue(ctx context.Context, c valkey.Client, q string) (map[string]FinalJob, error) {
	jobs := map[string]FinalJob{}
	for _, set := range Sets {
		ids, err := c.Do(ctx, c.B().Zrange().Key(legacy.Key(q, set)).Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("ZRANGE %s: %w", set, err)
		}
		for _, id := range ids {
			j := jobs[id]
			j.Sets = append(j.Sets, set)
			jobs[id] = j
		}
	}
	prefix := legacy.JobKey(q, "")
	var cursor uint64
	for range 100000 {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		// One round trip a page: a queue of a 30-minute campaign has
		// hundreds of thousands of rows.
		cmds := make(valkey.Commands, len(e.Elements))
		for i, k := range e.Elements {
			cmds[i] = c.B().Hgetall().Key(k).Build()
		}
		for i, r := range c.DoMulti(ctx, cmds...) {
			k := e.Elements[i]
			m, err := r.AsStrMap()
			if err != nil {
				return nil, fmt.Errorf("HGETALL %s: %w", k, err)
			}
			id := strings.TrimPrefix(k, prefix)
			j := jobs[id]
			j.Row, j.Payload, j.State = true, m["payload"], m["state"]
			jobs[id] = j
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	return jobs, nil
}

// queueKeys counts the keys of queue q on the node at c.
func queueKeys(ctx context.Context, c valkey.Client, q string) (int, error) {
	n := 0
	var cursor uint64
	for range 100000 {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("emq:{"+q+"}:*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return 0, err
		}
		n += len(e.Elements)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	return n, nil
}
