package limits

import (
	"strconv"
	"testing"
	"time"
)

// expectedAuthDelay is the least the k-th failure (1-based) of an address
// waits, by the documented schedule.
func expectedAuthDelay(k int, base, ceiling time.Duration) time.Duration {
	if k <= FreeAuthFailures {
		return 0
	}
	return min(base<<min(k-FreeAuthFailures-1, 16), ceiling)
}

// The table of addresses decays, serialises an address's delayed replies,
// and stays bounded.
func TestAuthTableDecaysAndStaysBounded(t *testing.T) {
	var tb AuthTable
	if err := tb.RegisterMetrics(nil); err != nil {
		t.Fatal(err)
	}
	const base, ceiling = 100 * time.Millisecond, 2 * time.Second
	t0 := time.Unix(1_000_000, 0)
	for k := 1; k <= 6; k++ {
		if got, want := tb.Failed("10.0.0.1", t0, base, ceiling), expectedAuthDelay(k, base, ceiling); got < want {
			t.Errorf("failure %d waits %v, want %v", k, got, want)
		}
	}
	// Failures 4, 5 and 6 arrived at once: their replies go one after the
	// other (100ms, +200ms, +400ms).
	if got := tb.Failed("10.0.0.1", t0, base, ceiling); got != (100+200+400+800)*time.Millisecond {
		t.Errorf("a seventh failure at the same instant waits %v, want 1.5s (after the others)", got)
	}
	// Another address is counted on its own.
	if got := tb.Failed("10.0.0.2", t0, base, ceiling); got != 0 {
		t.Errorf("another address's first failure waits %v", got)
	}
	// Three half-lives later the count (7) is down to 0: free again.
	later := t0.Add(3*authFailHalfLife + 10*time.Second)
	if got := tb.Failed("10.0.0.1", later, base, ceiling); got != 0 {
		t.Errorf("after three half-lives a failure waits %v, want none", got)
	}
	for i := range 2 * maxAuthAddrs {
		tb.Failed("192.0.2."+strconv.Itoa(i), later.Add(time.Duration(i)), base, ceiling)
	}
	if len(tb.addrs) > maxAuthAddrs {
		t.Errorf("the table holds %d addresses, more than %d", len(tb.addrs), maxAuthAddrs)
	}
	if _, ok := tb.addrs["192.0.2."+strconv.Itoa(2*maxAuthAddrs-1)]; !ok {
		t.Error("the newest address was not kept")
	}
	if SourceHost("127.0.0.1:5555") != "127.0.0.1" || SourceHost("[::1]:5555") != "::1" {
		t.Error("SourceHost does not take the IP of host:port")
	}
}
