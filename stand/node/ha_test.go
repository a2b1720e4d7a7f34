package node

import (
	"strings"
	"testing"
	"time"
)

func TestHAFailoverIntegration(t *testing.T) { EachServer(t, testHAFailover) }

// testHAFailover starts a module primary, its replica and three sentinels,
// kills the primary and checks that the sentinels promote the replica,
// which holds the primary's brand and data.
func testHAFailover(t *testing.T, srv Server) {
	h := StartHAT(t, HAOptions{Server: srv.Path, Role: Module})
	if len(h.Sentinels) != 3 || h.Opts.DownAfter != DefaultDownAfter {
		t.Fatalf("stand: %d sentinels, down-after %v", len(h.Sentinels), h.Opts.DownAfter)
	}
	for _, s := range h.Sentinels {
		if role, err := s.Role(); err != nil || role != "sentinel" {
			t.Fatalf("sentinel %s ROLE = %q, %v", s.Addr, role, err)
		}
	}
	if role, err := h.Replica.Role(); err != nil || role != "slave" {
		t.Fatalf("replica ROLE = %q, %v", role, err)
	}
	brand := get(t, h.Primary, VersionKey)
	if !strings.HasPrefix(brand, "$") || brand == "$-1\r\n" {
		t.Fatalf("primary brand %q", brand)
	}
	if got := mustRaw(t, h.Primary, "SET", "before", "kill"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	if got := mustRaw(t, h.Primary, "WAIT", "1", "5000"); got != ":1\r\n" {
		t.Fatalf("WAIT 1: %q", got)
	}

	killed := time.Now()
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	promoted, err := h.WaitPromoted(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: the sentinels promoted %s %v after the SIGKILL", srv.Name, promoted.Addr, time.Since(killed).Round(time.Millisecond))
	if promoted != h.Replica {
		t.Fatalf("promoted %s, want the replica %s", promoted.Addr, h.Replica.Addr)
	}
	if got := get(t, promoted, VersionKey); got != brand {
		t.Fatalf("promoted brand %q, want the primary's %q", got, brand)
	}
	if got := get(t, promoted, "before"); got != "$4\r\nkill\r\n" {
		t.Fatalf("promoted GET before = %q", got)
	}
	if got := mustRaw(t, promoted, "SET", "after", "promotion"); got != "+OK\r\n" {
		t.Fatalf("write on the promoted node: %q", got)
	}
}
