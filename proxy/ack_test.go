package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Writes confirmed by a replica (upstream/ack.go), on a module primary with one
// replica, once per server.

// waitCalls returns the calls of WAIT the node has served.
func waitCalls(t *testing.T, n *node.Node) int64 {
	t.Helper()
	st, err := node.CommandStats(context.Background(), n.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	return st["wait"]
}

// ackStand starts a module primary with a synchronised replica and a proxy
// in front of it that confirms writes with one replica within ackTimeout
// (and, when replyTimeout is not 0, with that reply timeout), and waits for
// a first confirmed write: a replica just synchronised may take a moment to
// acknowledge (Valkey 8 under the race detector).
func ackStand(t *testing.T, srv node.Server, ackTimeout, replyTimeout time.Duration) (p, r *node.Node, h *harness) {
	t.Helper()
	p = node.StartT(t, node.Options{Role: node.Module, Server: srv.Path})
	r = node.StartT(t, node.Options{Role: node.Module, Server: srv.Path, ReplicaOf: p.Addr})
	if err := r.WaitSynced(testTimeout); err != nil {
		t.Fatal(err)
	}
	h = startProxy(t, p, func(o *Options) {
		o.Upstream.AckReplicas, o.Upstream.AckTimeout = 1, ackTimeout
		if replyTimeout != 0 {
			o.Upstream.Timeout = replyTimeout
		}
	})
	warm := h.dial()
	poll(t, "a first write confirmed", func() bool { return string(warm.do("SET", "warm", "1").got) == "+OK\r\n" })
	return p, r, h
}

func TestAckReplicasIntegration(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (a frozen replica, WAIT timeouts): runs beside the other such tests
	node.EachServerParallel(t, testAckReplicas)
}

func testAckReplicas(t *testing.T, srv node.Server) {
	const ackTimeout = 300 * time.Millisecond
	p, r, h := ackStand(t, srv, ackTimeout, 0)
	c := h.dial()
	job, pending := "emq:{q}:job:J1", "emq:{q}:pending"
	enqueue := func(id string) []string {
		return cmd("EVALSHA", enqueueSHA, "2", "emq:{q}:job:"+id, pending, id, "payload")
	}

	{ // a batch of writes waits once
		before := waitCalls(t, p)
		c.send(cmd("SET", "a", "1"), cmd("GET", "a"), enqueue("J1"), cmd("INCR", "a"))
		c.read().is("+OK\r\n")
		c.read().is("$1\r\n1\r\n")
		c.read().is(":1\r\n")
		c.read().is(":2\r\n")
		if got := waitCalls(t, p) - before; got != 1 {
			t.Errorf("WAIT ran %d times for one batch of writes, want 1", got)
		}
	}
	{ // reads do not wait
		before := waitCalls(t, p)
		c.send(cmd("GET", "a"), cmd("HGET", job, "state"), cmd("EXISTS", "a"))
		c.read().is("$1\r\n2\r\n")
		c.read().is("$7\r\npending\r\n")
		c.read().is(":1\r\n")
		if got := waitCalls(t, p) - before; got != 0 {
			t.Errorf("WAIT ran %d times for a batch of reads", got)
		}
	}

	// The replica stops acknowledging: the writes are applied on the
	// primary, but their clients get the explicit error instead; reads
	// and the writes' own errors pass unchanged.
	if err := r.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = r.Thaw()
		}
	}()
	unconfirmed := "-UPSTREAM node write not confirmed by 1 replicas within 300ms (WAIT answered 0); the command may have been applied\r\n"
	short := "-UPSTREAM node write not confirmed by 1 replicas (replicas short: the last WAIT answered 0; writes wait for them again once one confirms); the command may have been applied\r\n"
	unacked := func() float64 { return testutil.ToFloat64(h.srv.met.Unacked.WithLabelValues("node")) }
	{ // a write not confirmed gets the error
		before := unacked()
		start := time.Now()
		c.send(cmd("SET", "b", "x"), cmd("GET", "a"), enqueue("J2"), cmd("INCR", "b"), cmd("SET", "c", "y"))
		c.read().is(unconfirmed)
		c.read().is("$1\r\n2\r\n")
		c.read().is(unconfirmed)
		c.read().hasPrefix("-ERR value is not an integer")
		c.read().is(unconfirmed)
		if took := time.Since(start); took < ackTimeout {
			t.Errorf("answered after %v, before WAIT's timeout %v", took, ackTimeout)
		}
		if got := unacked() - before; got != 3 {
			t.Errorf("emqproxy_upstream_unconfirmed_total grew by %v, want 3", got)
		}
		// Applied on the primary all the same.
		c.do("GET", "b").is("$1\r\nx\r\n")
		c.do("HGET", "emq:{q}:job:J2", "state").is("$7\r\npending\r\n")
	}
	{ // a transaction not confirmed gets the error at EXEC
		c.send(cmd("MULTI"), cmd("SET", "t", "1"), cmd("GET", "t"), cmd("EXEC"))
		c.read().is("+OK\r\n")
		c.read().is("+QUEUED\r\n")
		c.read().is("+QUEUED\r\n")
		// Short now: the probe connection may not be up yet, then the
		// batch is answered at once without WAIT.
		if r := string(c.read().got); r != unconfirmed && r != short {
			t.Errorf("EXEC while short: %q", r)
		}
		c.send(cmd("MULTI"), cmd("GET", "t"), cmd("EXEC"))
		c.read().is("+OK\r\n")
		c.read().is("+QUEUED\r\n")
		c.read().is("*1\r\n$1\r\n1\r\n") // a read-only transaction does not wait
	}
	{ // while short, one batch waits on the probe connection, the others not at all
		poll(t, "the probe connection", func() bool { return h.srv.up.ProbeConnected() })
		before := waitCalls(t, p)
		c.send(cmd("SET", "p", "1"))
		poll(t, "the probe to be out", h.srv.up.AckProbing)
		other := h.dial()
		other.send(cmd("SET", "q", "1"), cmd("GET", "a"))
		other.read().is(short)
		other.read().is("$1\r\n2\r\n")
		c.read().is(unconfirmed)
		if got := waitCalls(t, p) - before; got != 1 {
			t.Errorf("WAIT ran %d times while short, want 1 (the probe's)", got)
		}
		other.do("GET", "q").is("$1\r\n1\r\n") // applied all the same
	}
	if err := r.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	{ // confirmed again
		poll(t, "the replica to acknowledge again", func() bool {
			return !strings.HasPrefix(string(c.do("SET", "d", "z").got), "-UPSTREAM")
		})
		c.do("SET", "e", "z").is("+OK\r\n")
		if got := nodeGet(t, r, "e"); got != "$1\r\nz\r\n" {
			t.Errorf("the replica holds e = %q", got)
		}
	}
}

// Many clients' write batches combined into one write to the node are
// confirmed by one WAIT, the write's last command: the node serves fewer
// WAITs than batches, every client gets its own replies, and every write
// acknowledged to a client is on the replica. A frozen replica then gets
// every write of a combined write the not-confirmed error, the writes of
// the batches that rode on another's WAIT included.
func TestAckOneWaitPerWriteIntegration(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (a frozen replica, WAIT timeouts): runs beside the other such tests
	node.EachServerParallel(t, testAckOneWaitPerWrite)
}

func testAckOneWaitPerWrite(t *testing.T, srv node.Server) {
	p, r, h := ackStand(t, srv, 300*time.Millisecond, 0)

	const clients, each = 16, 100
	before := waitCalls(t, p)
	errs := make(chan error, clients)
	for i := range clients {
		go func() {
			got, err := incrs(h.addr, "ctr"+strconv.Itoa(i), each)
			for k, r := range got {
				if want := ":" + strconv.Itoa(k+1) + "\r\n"; err == nil && string(r) != want {
					err = fmt.Errorf("client %d: INCR %d answered %q, want %q", i, k+1, r, want)
				}
			}
			errs <- err
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waits := waitCalls(t, p) - before
	t.Logf("%d write batches confirmed by %d WAITs", clients*each, waits)
	if waits >= clients*each {
		t.Errorf("%d WAITs for %d write batches: one a batch, not one a write", waits, clients*each)
	}
	// Acknowledged means on the replica.
	for i := range clients {
		got, err := node.RawDo(r.Addr, "GET", "ctr"+strconv.Itoa(i))
		if err != nil || string(got) != "$3\r\n100\r\n" {
			t.Errorf("replica ctr%d = %q %v, want 100", i, got, err)
		}
	}

	// A frozen replica: every write of every batch gets the error, riders
	// included; the first batch that finds the replicas short tells the
	// rest (short mode), so each client gets the error at once after it.
	if err := r.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Thaw() }()
	for i := range clients {
		go func() {
			got, err := incrs(h.addr, "frozen"+strconv.Itoa(i), 1)
			if err == nil && !strings.HasPrefix(string(got[0]), "-UPSTREAM node write not confirmed by 1 replicas") {
				err = fmt.Errorf("client %d: a write while the replica is frozen answered %q", i, got[0])
			}
			errs <- err
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// incrs sends n INCRs of key through the proxy at addr on a connection of
// its own, one round trip each, and returns their replies.
func incrs(addr, key string, n int) ([][]byte, error) {
	c, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	br := bufio.NewReader(c)
	var got [][]byte
	for range n {
		if _, err := c.Write(resp.AppendCommand(nil, "INCR", key)); err != nil {
			return got, err
		}
		r, err := resp.ReadReply(br)
		if err != nil {
			return got, err
		}
		got = append(got, r)
	}
	return got, nil
}

// A read does not wait behind a WAIT: while a write's WAIT waits for a
// frozen replica on the shared connection, another client's read goes on
// the reads' connection and is answered with the WAIT still blocked on the
// primary (its timeout, 2s, is far off); the write then gets the
// not-confirmed error. Without the reads' connection the server would
// serve the read only after the WAIT.
func TestAckReadsDoNotWaitBehindAWaitIntegration(t *testing.T) {
	node.Long(t)
	t.Parallel() // timer-bound (a frozen replica, WAIT timeouts): runs beside the other such tests
	node.EachServerParallel(t, testAckReadsDoNotWait)
}

func testAckReadsDoNotWait(t *testing.T, srv node.Server) {
	p, r, h := ackStand(t, srv, 2*time.Second, 4*time.Second)
	c, other := h.dial(), h.dial()
	c.do("SET", "a", "1").is("+OK\r\n")
	poll(t, "the reads' connection", h.srv.up.ReadsConnected)
	blocked := func() bool {
		raw, err := node.RawDo(p.Addr, "INFO", "clients")
		return err == nil && strings.Contains(string(raw), "blocked_clients:1\r\n")
	}

	if err := r.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Thaw() }()
	before := waitCalls(t, p)
	c.send(cmd("SET", "a", "2"))
	poll(t, "the write's WAIT to block on the primary", blocked)
	other.do("GET", "a").is("$1\r\n2\r\n")
	if !blocked() {
		t.Errorf("the read was answered only after the WAIT ahead of it")
	}
	c.read().hasPrefix("-UPSTREAM node write not confirmed by 1 replicas within 2s")
	if got := waitCalls(t, p) - before; got != 1 {
		t.Errorf("WAIT ran %d times for a write and a read, want 1", got)
	}
}
