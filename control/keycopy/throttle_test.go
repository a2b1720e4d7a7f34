package keycopy

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "unlimited": 0, "1000": 1000, "500k": 500_000, "2MiB": 2 << 20, "2mib/s": 2 << 20,
		"1.5M": 1_500_000, "1GB": 1_000_000_000, "64KiB": 64 << 10, "100B": 100,
	} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-1", "5 apples", "MiB"} {
		if _, err := ParseRate(in); err == nil || !strings.Contains(err.Error(), "--rate") {
			t.Errorf("ParseRate(%q) = %v, want an error naming --rate", in, err)
		}
	}
}

// TestLimiterPaces: a limiter at 1 MB/s lets 300 kB through in about
// 0.2s (a tenth of a second of burst first); a nil one never waits.
func TestLimiterPaces(t *testing.T) {
	ctx := context.Background()
	var l *limiter
	if err := l.wait(ctx, 1<<30); err != nil {
		t.Fatal(err)
	}
	l = newLimiter(1_000_000)
	t0 := time.Now()
	for range 30 {
		if err := l.wait(ctx, 10_000); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Errorf("300 kB at 1 MB/s took %v, want at least 0.15s", d)
	}
}
