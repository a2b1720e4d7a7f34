package node

import (
	"strings"
	"testing"
	"time"
)

func TestHAFailoverIntegration(t *testing.T) {
	Long(t)
	EachServerParallel(t, testHAFailover)
}

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

func TestRejoinIntegration(t *testing.T) {
	Long(t)
	EachServerParallel(t, testRejoin)
}

// testRejoin: the killed primary comes back through Rejoin while a
// sentinel is asked to fail the set over again and again from the moment
// it restarts, as the sentinels do on their own on a loaded machine. The
// node may be promoted only once it holds the data: whichever node is
// master at the end holds the brand and the write made before the kill,
// and Rejoin returns with the node promotable (the next failover picks
// it). With a plain restart, the first failover the sentinels accept
// promotes the node still loading its synchronisation, and the set ends
// empty.
func testRejoin(t *testing.T, srv Server) {
	h := StartHAT(t, HAOptions{Server: srv.Path, Role: Module})
	brand := get(t, h.Primary, VersionKey)
	if got := mustRaw(t, h.Primary, "SET", "before", "kill"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	if got := mustRaw(t, h.Primary, "WAIT", "1", "5000"); got != ":1\r\n" {
		t.Fatalf("WAIT 1: %q", got)
	}
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	promoted, err := h.WaitPromoted(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stop, asked := make(chan struct{}), make(chan int)
	go func() {
		accepted := 0
		defer func() { asked <- accepted }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if r, err := RawDo(h.Sentinels[0].Addr, "SENTINEL", "FAILOVER", h.Master); err == nil && string(r) == "+OK\r\n" {
				accepted++
			}
		}
	}()
	err = h.Rejoin(h.Primary, Options{Role: Module, Server: srv.Path, ReplicaOf: promoted.Addr}, 30*time.Second)
	close(stop)
	accepted := <-asked
	if err != nil {
		t.Fatal(err)
	}
	// A failover accepted as Rejoin returned may still be under way.
	master, err := h.WaitWhole(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d failovers accepted while %s rejoined; master now %s", srv.Name, accepted, h.Primary.Addr, master.Addr)
	for _, n := range []*Node{master, h.Primary} {
		if got := get(t, n, VersionKey); got != brand {
			t.Fatalf("%s: brand %q, want %q (a node promoted before it had synchronised)", n.Addr, got, brand)
		}
		if got := get(t, n, "before"); got != "$4\r\nkill\r\n" {
			t.Fatalf("%s: GET before = %q", n.Addr, got)
		}
	}
	// Promotable from the moment Rejoin returns: a failover picks it.
	deadline := time.Now().Add(30 * time.Second)
	for master != h.Primary {
		r, err := RawDo(h.Sentinels[0].Addr, "SENTINEL", "FAILOVER", h.Master)
		if err != nil {
			t.Fatal(err)
		}
		if string(r) == "+OK\r\n" {
			if err := h.WaitNamed(h.Primary, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER after Rejoin: %q", r)
		}
		time.Sleep(100 * time.Millisecond)
		if master, err = h.WaitWhole(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := get(t, h.Primary, "before"); got != "$4\r\nkill\r\n" {
		t.Fatalf("the rejoined node, master: GET before = %q", got)
	}
}
