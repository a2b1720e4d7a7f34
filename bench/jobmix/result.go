package jobmix

import (
	"slices"
	"time"
)

// Result is one run's outcome.
type Result struct {
	Mode      Mode    `json:"mode"`
	Addr      string  `json:"addr"`
	Clients   int     `json:"clients"`
	Pipeline  int     `json:"pipeline"`
	Ops       int64   `json:"ops"`     // script calls completed in the window
	Seconds   float64 `json:"seconds"` // the window's length
	OpsPerSec float64 `json:"ops_per_sec"`
	// P50us and P99us are the latency percentiles of one call (pipeline 1)
	// or one round trip of Pipeline calls, in microseconds, over the window.
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	Samples int     `json:"samples"`
	// EnqueueP50us and EnqueueP99us are the percentiles of the enqueue
	// round trip alone; LoopP50us and LoopP99us those of a worker's loop,
	// claim (with the legacy client's pause read) plus complete.
	EnqueueP50us float64 `json:"enqueue_p50_us"`
	EnqueueP99us float64 `json:"enqueue_p99_us"`
	LoopP50us    float64 `json:"loop_p50_us"`
	LoopP99us    float64 `json:"loop_p99_us"`
	// With Config.KeepGoing: Errors is the calls that failed in the
	// window, FirstError the first failure of the run (warmup included);
	// Stalled is the clients whose call had been waiting for its reply
	// for StallAfter or longer at the window's end, and StalledUs the
	// longest wait of a call in flight then.
	Errors     int64   `json:"errors,omitempty"`
	FirstError string  `json:"first_error,omitempty"`
	Stalled    int     `json:"stalled,omitempty"`
	StalledUs  float64 `json:"stalled_us,omitempty"`
}

// samples are one worker's latencies over the window.
type samples struct {
	calls, enqueue, loop []time.Duration
}

// add records one cycle, while fewer than max calls are kept.
func (s *samples) add(max int, enq, claim, complete time.Duration) {
	if len(s.calls)+3 > max {
		return
	}
	s.calls = append(s.calls, enq, claim, complete)
	s.enqueue = append(s.enqueue, enq)
	s.loop = append(s.loop, claim+complete)
}

// us is d in microseconds.
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// percentile returns the p-th percentile (0..1) of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func summarize(cfg Config, ops int64, window time.Duration, lat []samples) Result {
	var all, enq, loop []time.Duration
	for _, l := range lat {
		all = append(all, l.calls...)
		enq = append(enq, l.enqueue...)
		loop = append(loop, l.loop...)
	}
	for _, s := range [][]time.Duration{all, enq, loop} {
		slices.Sort(s)
	}
	r := Result{
		Mode: cfg.Mode, Addr: cfg.Addr, Clients: cfg.Clients, Pipeline: cfg.Pipeline,
		Ops: ops, Seconds: window.Seconds(), Samples: len(all),
		P50us: us(percentile(all, 0.50)), P99us: us(percentile(all, 0.99)),
		EnqueueP50us: us(percentile(enq, 0.50)), EnqueueP99us: us(percentile(enq, 0.99)),
		LoopP50us: us(percentile(loop, 0.50)), LoopP99us: us(percentile(loop, 0.99)),
	}
	if window > 0 {
		r.OpsPerSec = float64(ops) / window.Seconds()
	}
	return r
}
