package jobmix

import (
	"context"
	"fmt"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
)

// leaseMs is the lease of every claim: long enough that no job expires
// during a run.
const leaseMs = 60_000

// worker is one client of the mix: one connection, one queue.
type worker interface {
	enqueue(ctx context.Context, ids []string) error
	claim(ctx context.Context, n int) ([]string, error)
	complete(ctx context.Context, ids []string) error
	// reset readies the client for its next cycle after a failed call
	// (Config.KeepGoing): valkey-go reconnects by itself; a legacy client
	// that a fence refusal stopped is reconnected.
	reset(ctx context.Context)
	close()
}

func newWorker(ctx context.Context, cfg Config, q string) (worker, error) {
	payload := strings.Repeat("p", cfg.Payload)
	if cfg.Mode == Legacy {
		c, err := legacy.Dial(ctx, legacy.Options{Addr: cfg.Addr, PoolSize: 1})
		if err != nil {
			return nil, err
		}
		return &legacyWorker{c: c, q: q, payload: payload}, nil
	}
	vc, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:       []string{cfg.Addr},
		AlwaysRESP2:       true,
		DisableCache:      true,
		DisableRetry:      true,
		ForceSingleClient: true,
		PipelineMultiplex: -1,
		BlockingPoolSize:  1,
		ClientSetInfo:     valkey.DisableClientSetInfo,
	})
	if err != nil {
		return nil, fmt.Errorf("jobmix: connect %s: %w", cfg.Addr, err)
	}
	if cfg.Mode == Get {
		return &getWorker{vc: vc, key: legacy.Key(q, "get")}, nil
	}
	return &nativeWorker{vc: vc, q: q, payload: payload, pauseRead: cfg.PauseRead}, nil
}

// getWorker sends one GET per step (Mode Get).
type getWorker struct {
	vc  valkey.Client
	key string
}

func (w *getWorker) close() { w.vc.Close() }

func (w *getWorker) reset(context.Context) {}

func (w *getWorker) get(ctx context.Context, n int) error {
	for range n {
		if err := w.vc.Do(ctx, w.vc.B().Get().Key(w.key).Build()).Error(); err != nil && !valkey.IsValkeyNil(err) {
			return fmt.Errorf("%w: GET: %w", ErrMix, err)
		}
	}
	return nil
}

func (w *getWorker) enqueue(ctx context.Context, ids []string) error { return w.get(ctx, len(ids)) }

func (w *getWorker) claim(ctx context.Context, n int) ([]string, error) { return nil, w.get(ctx, n) }

func (w *getWorker) complete(ctx context.Context, ids []string) error { return w.get(ctx, 1) }

// legacyWorker drives the wire-4 client.
type legacyWorker struct {
	c       *legacy.Client
	q       string
	payload string
}

func (w *legacyWorker) close() { w.c.Close() }

func (w *legacyWorker) reset(ctx context.Context) {
	if w.c.Stopped() != nil {
		_ = w.c.Reconnect(ctx) // a failure is the next call's error
	}
}

func (w *legacyWorker) enqueue(ctx context.Context, ids []string) error {
	if len(ids) == 1 {
		ok, err := w.c.Enqueue(ctx, w.q, ids[0], w.payload)
		return wantTrue("enqueue", ok, err)
	}
	b := w.c.Batch()
	for _, id := range ids {
		b.Enqueue(w.q, id, w.payload)
	}
	rs, err := b.Exec(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		ok, err := r.Bool()
		if err := wantTrue("enqueue", ok, err); err != nil {
			return err
		}
	}
	return nil
}

func (w *legacyWorker) claim(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, 0, n)
	if n == 1 {
		job, empty, err := w.c.Claim(ctx, w.q, leaseMs)
		if err := wantJob(empty, err); err != nil {
			return nil, err
		}
		return append(ids, job.ID), nil
	}
	b := w.c.Batch()
	for range n {
		b.Claim(w.q, leaseMs)
	}
	rs, err := b.Exec(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		job, empty, err := r.Job()
		if err := wantJob(empty, err); err != nil {
			return nil, err
		}
		ids = append(ids, job.ID)
	}
	return ids, nil
}

func (w *legacyWorker) complete(ctx context.Context, ids []string) error {
	if len(ids) == 1 {
		ok, err := w.c.Complete(ctx, w.q, ids[0])
		return wantTrue("complete", ok, err)
	}
	b := w.c.Batch()
	for _, id := range ids {
		b.Complete(w.q, id)
	}
	rs, err := b.Exec(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		ok, err := r.Bool()
		if err := wantTrue("complete", ok, err); err != nil {
			return err
		}
	}
	return nil
}

// nativeWorker sends EMQ.* with valkey-go, as a wire-6 connector does.
type nativeWorker struct {
	vc        valkey.Client
	q         string
	payload   string
	cmds      valkey.Commands
	pauseRead bool // read the pause flag before each claim (Config.PauseRead)
}

func (w *nativeWorker) close() { w.vc.Close() }

func (w *nativeWorker) reset(context.Context) {}

func (w *nativeWorker) do(ctx context.Context, build func(b valkey.Builder, i int) valkey.Completed, n int) ([]valkey.ValkeyResult, error) {
	if n == 1 {
		r := w.vc.Do(ctx, build(w.vc.B(), 0))
		return []valkey.ValkeyResult{r}, nil
	}
	w.cmds = w.cmds[:0]
	for i := range n {
		w.cmds = append(w.cmds, build(w.vc.B(), i))
	}
	return w.vc.DoMulti(ctx, w.cmds...), nil
}

func (w *nativeWorker) enqueue(ctx context.Context, ids []string) error {
	pending := legacy.Key(w.q, "pending")
	rs, _ := w.do(ctx, func(b valkey.Builder, i int) valkey.Completed {
		return b.Arbitrary("EMQ.ENQUEUE", "2").Keys(legacy.JobKey(w.q, ids[i]), pending).Args(ids[i], w.payload).Build()
	}, len(ids))
	for _, r := range rs {
		n, err := r.AsInt64()
		if err := wantTrue("EMQ.ENQUEUE", n == 1, err); err != nil {
			return err
		}
	}
	return nil
}

func (w *nativeWorker) claim(ctx context.Context, n int) ([]string, error) {
	if w.pauseRead {
		paused, err := w.vc.Do(ctx, w.vc.B().Exists().Key(legacy.Key(w.q, "paused")).Build()).AsInt64()
		if err != nil {
			return nil, fmt.Errorf("%w: EXISTS paused: %w", ErrMix, err)
		}
		if paused != 0 {
			return nil, fmt.Errorf("%w: queue %s is paused", ErrMix, w.q)
		}
	}
	pending, active, lease := legacy.Key(w.q, "pending"), legacy.Key(w.q, "active"), fmt.Sprint(leaseMs)
	rs, _ := w.do(ctx, func(b valkey.Builder, _ int) valkey.Completed {
		return b.Arbitrary("EMQ.CLAIM", "2").Keys(pending, active).Args(lease).Build()
	}, n)
	ids := make([]string, 0, n)
	for _, r := range rs {
		a, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("%w: EMQ.CLAIM: %w", ErrMix, err)
		}
		if len(a) != 3 {
			return nil, fmt.Errorf("%w: EMQ.CLAIM answered %d elements", ErrMix, len(a))
		}
		id, err := a[0].ToString()
		if err != nil {
			return nil, fmt.Errorf("%w: EMQ.CLAIM id: %w", ErrMix, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (w *nativeWorker) complete(ctx context.Context, ids []string) error {
	active, done := legacy.Key(w.q, "active"), legacy.Key(w.q, "done")
	rs, _ := w.do(ctx, func(b valkey.Builder, i int) valkey.Completed {
		return b.Arbitrary("EMQ.COMPLETE", "3").Keys(active, legacy.JobKey(w.q, ids[i]), done).Args(ids[i]).Build()
	}, len(ids))
	for _, r := range rs {
		n, err := r.AsInt64()
		if err := wantTrue("EMQ.COMPLETE", n == 1, err); err != nil {
			return err
		}
	}
	return nil
}

func wantTrue(op string, ok bool, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMix, op, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s answered 0", ErrMix, op)
	}
	return nil
}

func wantJob(empty bool, err error) error {
	if err != nil {
		return fmt.Errorf("%w: claim: %w", ErrMix, err)
	}
	if empty {
		return fmt.Errorf("%w: claim found no job", ErrMix)
	}
	return nil
}
