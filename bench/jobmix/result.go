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
}

// percentile returns the p-th percentile (0..1) of sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func summarize(cfg Config, ops int64, window time.Duration, lat [][]time.Duration) Result {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	r := Result{
		Mode: cfg.Mode, Addr: cfg.Addr, Clients: cfg.Clients, Pipeline: cfg.Pipeline,
		Ops: ops, Seconds: window.Seconds(), Samples: len(all),
		P50us: float64(percentile(all, 0.50).Nanoseconds()) / 1e3,
		P99us: float64(percentile(all, 0.99).Nanoseconds()) / 1e3,
	}
	if window > 0 {
		r.OpsPerSec = float64(ops) / window.Seconds()
	}
	return r
}
