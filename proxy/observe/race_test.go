//go:build race

package observe

// raceEnabled: under the race detector sync.Pool drops items at random, so
// zap's pooled buffers allocate; the allocation tests are skipped.
const raceEnabled = true
