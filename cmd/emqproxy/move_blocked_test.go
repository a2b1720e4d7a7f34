package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// blockedClient sends `BLPOP key 0` on a connection of its own through the
// proxy at addr and returns the connection and its reader; the command is
// checked to be blocked (no reply within 300ms).
func blockedClient(t *testing.T, addr, key string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	cmd := fmt.Sprintf("*3\r\n$5\r\nBLPOP\r\n$%d\r\n%s\r\n$1\r\n0\r\n", len(key), key)
	if _, err := nc.Write([]byte(cmd)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	_ = nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if line, err := br.ReadString('\n'); err == nil {
		t.Fatalf("BLPOP %s 0 answered %q; want it blocked", key, line)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return nc, br
}

// TestQueueMoveWithAClientBlocked: a client blocked in `BLPOP {x}:l 0`
// through the proxy stops neither its control loop nor a move of another
// queue. The proxy acknowledges the hold (it is not waited out), another
// queue's clients through the same proxy get no TRYAGAIN, and the blocked
// client is still blocked after the move and served by the next push.
func TestQueueMoveWithAClientBlocked(t *testing.T) {
	node.Long(t)
	s := startMoveStand(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := s.proxy(t, "proxy1")
	waitRegistered(t, s.src, 1)
	waitRegistered(t, s.dst, 1)

	nc, br := blockedClient(t, p.listen, "{x}:l")

	billing, quotes := &workload{}, &workload{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go billing.run(ctx, t, s.m, p.listen, "billing", "B", stop, &wg)
	go quotes.run(ctx, t, s.m, p.listen, "quotes", "Q", stop, &wg)
	time.Sleep(500 * time.Millisecond)

	began := time.Now()
	out, err := s.run(t, "move", "billing", "--to", "module-a")
	took := time.Since(began)
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, want := range []string{"moved billing from scripts-b to module-a", "proxies acknowledged: 1 ", "proxies waited out (lease expired): 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Waiting the proxy's lease out (1s here) would take longer.
	if took > 5*time.Second {
		t.Errorf("the move took %v", took)
	}
	for _, w := range []*workload{billing, quotes} {
		for _, err := range w.errs {
			t.Errorf("client error: %v", err)
		}
	}
	t.Logf("move took %v; billing: %d ops, %d TRYAGAIN; quotes: %d ops, %d TRYAGAIN", took, billing.ops, billing.tryagains, quotes.ops, quotes.tryagains)
	if quotes.tryagains != 0 {
		t.Errorf("queue quotes got %d TRYAGAIN during the move of billing", quotes.tryagains)
	}
	if quotes.ops < 10 {
		t.Errorf("too little work on quotes: %d ops", quotes.ops)
	}
	for _, id := range billing.acked {
		if n := inSets(t, s.dst, "billing", id); n != 1 {
			t.Errorf("job %s is in %d sets of the target", id, n)
		}
	}

	// The blocked client was left alone: still blocked, served by a push.
	if err := s.dst.Do(ctx, s.dst.B().Rpush().Key("{x}:l").Element("v1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []string
	for range 5 { // *2 $5 {x}:l $2 v1
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the blocked client after the push: %v (read %q)", err, got)
		}
		got = append(got, strings.TrimSpace(line))
	}
	if want := []string{"*2", "$5", "{x}:l", "$2", "v1"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the blocked client got %q; want %q", got, want)
	}
}

// TestQueueMoveGivesUpACommandBlockedOnTheMovedQueue: a client blocked with
// no timeout on a key of the queue being moved keeps the proxy from
// acknowledging the hold only for the hold timeout (5s here): then its
// command is given up (the client gets an error, the command is dropped
// with its connection) and the hold is acknowledged, not waited out.
func TestQueueMoveGivesUpACommandBlockedOnTheMovedQueue(t *testing.T) {
	node.Long(t)
	s := startMoveStand(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := s.proxy(t, "proxy1")
	waitRegistered(t, s.src, 1)
	waitRegistered(t, s.dst, 1)
	c, err := legacy.Dial(ctx, legacy.Options{Addr: p.listen, Map: s.m, Brand: s.m.LegacyBrand})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, err := c.Enqueue(ctx, "billing", "J1", "p"); err != nil || !ok {
		t.Fatalf("enqueue: %v %v", ok, err)
	}

	nc, br := blockedClient(t, p.listen, "{billing}:l")
	began := time.Now()
	out, err := s.run(t, "move", "billing", "--to", "module-a")
	took := time.Since(began)
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	for _, want := range []string{"moved billing from scripts-b to module-a", "proxies acknowledged: 1 ", "proxies waited out (lease expired): 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if took < 4*time.Second {
		t.Errorf("the move took %v: the proxy acknowledged the hold with a command of the queue in flight", took)
	}
	_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "-") {
		t.Errorf("the client blocked on the moved queue got %q %v; want an error", line, err)
	}
	if n := inSets(t, s.dst, "billing", "J1"); n != 1 {
		t.Errorf("job J1 is in %d sets of the target", n)
	}
}
