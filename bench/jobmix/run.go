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
		errs     atomic.Int64 // KeepGoing: calls failed in the window
		firstErr error
		errOnce  sync.Once
		firstMsg string // KeepGoing: the run's first failure
		msgOnce  sync.Once
		wg       sync.WaitGroup
	)
	lat := make([]samples, len(ws))
	// inflight[i] is when client i's call in flight started (UnixNano, 0 =
	// none); kept with KeepGoing only, for Result.Stalled.
	inflight := make([]atomic.Int64, len(ws))
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
			// step runs one round trip; it returns its latency, stopStep
			// when the worker must stop, or failedStep when the call
			// failed and the client keeps going (KeepGoing).
			step := func(f func() error) time.Duration {
				t := time.Now()
				if cfg.KeepGoing {
					inflight[i].Store(t.UnixNano())
					defer inflight[i].Store(0)
				}
				if err := f(); err != nil {
					if runCtx.Err() != nil {
						return stopStep
					}
					if !cfg.KeepGoing {
						fail(err)
						return stopStep
					}
					msgOnce.Do(func() { firstMsg = err.Error() })
					if phase.Load() == phaseMeasure {
						errs.Add(1)
					}
					return failedStep
				}
				return time.Since(t)
			}
			var claimed []string
			steps := [3]func() error{
				func() error { return w.enqueue(runCtx, ids) },
				func() (err error) { claimed, err = w.claim(runCtx, cfg.Pipeline); return err },
				func() error { return w.complete(runCtx, claimed) },
			}
			for cycle := int64(0); cycle < cfg.MaxCycles && phase.Load() != phaseStop; cycle++ {
				for k := range ids {
					ids[k] = prefix + strconv.FormatInt(cycle*int64(cfg.Pipeline)+int64(k), 10)
				}
				var d [3]time.Duration
				failed := false
				for k, f := range steps {
					if d[k] = step(f); d[k] == stopStep {
						return
					} else if d[k] == failedStep {
						failed = true
						break
					}
				}
				if failed {
					// The next cycle starts afresh: a claim that finds
					// nothing, or a complete of a job never claimed, is
					// counted too until the client's queue is in step.
					w.reset(runCtx)
					pause(runCtx, ErrorPause)
					continue
				}
				if phase.Load() == phaseMeasure {
					ops.Add(3 * int64(cfg.Pipeline))
					sm.add(cfg.MaxSamples, d[0], d[1], d[2])
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
	var stalled int
	var longest time.Duration
	if cfg.KeepGoing {
		end := time.Now()
		for i := range inflight {
			if since := inflight[i].Load(); since != 0 {
				waited := end.Sub(time.Unix(0, since))
				longest = max(longest, waited)
				if waited >= StallAfter {
					stalled++
				}
			}
		}
		cancel() // the calls still waiting are not waited for
	}
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
	res := summarize(cfg, ops.Load(), window, lat)
	res.Errors, res.FirstError, res.Stalled, res.StalledUs = errs.Load(), firstMsg, stalled, us(longest)
	return res, nil
}

// A step's outcome other than a latency.
const (
	stopStep   time.Duration = -1 // the worker stops
	failedStep time.Duration = -2 // the call failed; the client keeps going
)

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Queue is the queue name of client i of the run tagged tag.
func Queue(tag string, i int) string { return "bench" + tag + "c" + strconv.Itoa(i) }
