package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestMoverGC: the mover sets its collector's percent and soft memory
// limit, unless GOGC or GOMEMLIMIT set them.
func TestMoverGC(t *testing.T) {
	pct := debug.SetGCPercent(100)
	lim := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(pct); debug.SetMemoryLimit(lim) })

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	moverGC()
	if got := debug.SetGCPercent(100); got != moverGCPercent {
		t.Errorf("GC percent %d, want %d", got, moverGCPercent)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != moverMemLimit {
		t.Errorf("memory limit %d, want %d", got, moverMemLimit)
	}

	t.Setenv("GOGC", "100")
	t.Setenv("GOMEMLIMIT", "1GiB")
	moverGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent %d, want it left at 100", got)
	}
	if got := debug.SetMemoryLimit(math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: memory limit %d, want it left alone", got)
	}
}
