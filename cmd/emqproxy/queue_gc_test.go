package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestCopierGC: the mover sets its collector's percent and soft memory
// limit, unless GOGC or GOMEMLIMIT set them.
func TestCopierGC(t *testing.T) {
	pct := debug.SetGCPercent(100)
	lim := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(pct); debug.SetMemoryLimit(lim) })

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	copierGC()
	if got := debug.SetGCPercent(100); got != copierGCPercent {
		t.Errorf("GC percent %d, want %d", got, copierGCPercent)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != copierMemLimit {
		t.Errorf("memory limit %d, want %d", got, copierMemLimit)
	}

	t.Setenv("GOGC", "100")
	t.Setenv("GOMEMLIMIT", "1GiB")
	copierGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent %d, want it left at 100", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: memory limit %d, want it left alone", got)
	}
}
