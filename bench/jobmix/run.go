package jobmix

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Phases of a run.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// Run connects cfg.Clients clients, runs the mix for cfg.Warmup, then
// counts it for cfg.Duration, stops every client and returns the result.
// The first error stops the run and is returned.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return Result{}, err
	}
	if cfg.Tag == "" {
		cfg.Tag = strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	}
	ws := make([]worker, 0, cfg.Clients)
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	dialCtx, cancelDial := context.WithTimeout(ctx, 30*time.Second)
	defer cancelDial()
	for i := range cfg.Clients {
		w, err := newWorker(dialCtx, cfg, Queue(cfg.Tag, i))
		if err != nil {
			return Result{}, err
		}
		ws = append(ws, w)
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Warmup+cfg.Duration+30*time.Second)
	defer cancel()
	var (
		phase    atomic.Int32
		ops      atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	lat := make([]samples, len(ws))
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		phase.Store(phaseStop)
	}
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sm samples
			defer func() { lat[i] = sm }()
			ids := make([]string, cfg.Pipeline)
			prefix := cfg.Tag + "c" + strconv.Itoa(i) + "-"
			// step runs one round trip; it returns its latency, or -1
			// when the worker must stop.
			step := func(f func() error) time.Duration {
				t := time.Now()
				if err := f(); err != nil {
					if runCtx.Err() == nil {
						fail(err)
					}
					return -1
				}
				return time.Since(t)
			}
			var claimed []string
			for cycle := int64(0); cycle < cfg.MaxCycles && phase.Load() != phaseStop; cycle++ {
				for k := range ids {
					ids[k] = prefix + strconv.FormatInt(cycle*int64(cfg.Pipeline)+int64(k), 10)
				}
				enq := step(func() error { return w.enqueue(runCtx, ids) })
				if enq < 0 {
					return
				}
				claim := step(func() (err error) { claimed, err = w.claim(runCtx, cfg.Pipeline); return err })
				if claim < 0 {
					return
				}
				complete := step(func() error { return w.complete(runCtx, claimed) })
				if complete < 0 {
					return
				}
				if phase.Load() == phaseMeasure {
					ops.Add(3 * int64(cfg.Pipeline))
					sm.add(cfg.MaxSamples, enq, claim, complete)
				}
			}
		}()
	}

	wait := func(d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-runCtx.Done():
		}
	}
	wait(cfg.Warmup)
	phase.CompareAndSwap(phaseWarmup, phaseMeasure)
	t0 := time.Now()
	wait(cfg.Duration)
	measured := phase.CompareAndSwap(phaseMeasure, phaseStop)
	window := time.Since(t0)
	phase.Store(phaseStop)
	wg.Wait()
	if firstErr != nil {
		return Result{}, firstErr
	}
	if !measured {
		if err := runCtx.Err(); err != nil {
			return Result{}, err
		}
		return Result{}, errors.New("jobmix: run stopped before the window ended")
	}
	return summarize(cfg, ops.Load(), window, lat), nil
}

// Queue is the queue name of client i of the run tagged tag.
func Queue(tag string, i int) string { return "bench" + tag + "c" + strconv.Itoa(i) }
