package tail

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/discovery"
	"github.com/emqproxy/emqproxy/stand/node"
)

// replWait bounds every wait of these tests for the stream.
const replWait = 20 * time.Second

// replNode starts a bare node and applies the CONFIG SET pairs.
func replNode(t *testing.T, srv node.Server, role node.Role, config ...string) (*node.Node, valkey.Client) {
	t.Helper()
	n := node.StartT(t, node.Options{Role: role, Server: srv.Path})
	c := n.Client(t)
	for i := 0; i+1 < len(config); i += 2 {
		replDo(t, c, "CONFIG", "SET", config[i], config[i+1])
	}
	return n, c
}

func replOpts(n *node.Node) table.NodeOptions {
	return table.NodeOptions{Name: "src", Address: n.Addr, Password: n.Opts.Password}
}

// replOpen opens a stream, closed at cleanup.
func replOpen(t *testing.T, n *node.Node) (*replStream, replInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), replWait)
	defer cancel()
	r, info, err := openReplStream(ctx, replOpts(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, info
}

func replDo(t *testing.T, c valkey.Client, args ...string) valkey.ValkeyResult {
	t.Helper()
	res := c.Do(context.Background(), c.B().Arbitrary(args...).Build())
	if err := res.Error(); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return res
}

// replInfoField reads one field of an INFO section.
func replInfoField(t *testing.T, c valkey.Client, section, field string) string {
	t.Helper()
	txt, err := replDo(t, c, "INFO", section).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return infoFields(txt)[field]
}

// replCollect returns the next k commands of the stream as "db=<db> <args
// joined by spaces>", failing the test when they do not arrive in time.
func replCollect(t *testing.T, r *replStream, k int) []string {
	t.Helper()
	type got struct {
		cmd string
		err error
	}
	ch := make(chan got, k)
	go func() {
		for range k {
			db, argv, err := r.next()
			if err != nil {
				ch <- got{err: err}
				return
			}
			ch <- got{cmd: fmt.Sprintf("db=%d %s", db, bytes.Join(argv, []byte(" ")))}
		}
	}()
	timer := time.NewTimer(replWait)
	defer timer.Stop()
	var out []string
	for len(out) < k {
		select {
		case g := <-ch:
			if g.err != nil {
				t.Fatalf("after %q: %v", out, g.err)
			}
			out = append(out, g.cmd)
		case <-timer.C:
			_ = r.Close()
			t.Fatalf("only %d of %d commands arrived within %v: %q", len(out), k, replWait, out)
		}
	}
	return out
}

func replExpect(t *testing.T, r *replStream, want ...string) {
	t.Helper()
	if got := replCollect(t, r, len(want)); !slices.Equal(got, want) {
		t.Fatalf("stream:\n got %q\nwant %q", got, want)
	}
}

// replPoll polls f every 20 ms until it holds or the deadline passes.
func replPoll(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(replWait)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, replWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplStreamFullSync joins a node without a backlog, which answers with
// a diskless full synchronisation after its default delay (newlines
// meanwhile): the reader skips the RDB and returns the effects of the
// writes that follow, in order and with their database, consuming MULTI,
// EXEC and PING.
func TestReplStreamFullSync(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testReplFullSync)
}

func testReplFullSync(t *testing.T, srv node.Server) {
	n, c := replNode(t, srv, node.Bare, "repl-ping-replica-period", "1")
	replDo(t, c, "SET", "filler", strings.Repeat("x", 100_000))
	if got := replInfoField(t, c, "replication", "repl_backlog_active"); got != "0" {
		t.Fatalf("a fresh node has repl_backlog_active:%s", got)
	}
	forks := replInfoField(t, c, "stats", "total_forks")
	r, info := replOpen(t, n)
	if !info.Full || !info.Empty || info.Skipped <= 0 || r.rdbForm != "eof" || r.keepalives == 0 {
		t.Fatalf("join %+v, RDB framing %q, %d keepalives: want a full diskless synchronisation after newlines", info, r.rdbForm, r.keepalives)
	}
	// The RDB is filtered to no data: the 100 kB value never crossed.
	if info.Skipped >= 1000 {
		t.Fatalf("the empty RDB was %d bytes: the dataset was sent", info.Skipped)
	}
	if got := replInfoField(t, c, "stats", "total_forks"); got == forks {
		t.Fatalf("total_forks stayed %s: a full synchronisation without a fork", got)
	}
	if id := replInfoField(t, c, "replication", "master_replid"); info.ReplID != id {
		t.Fatalf("stream continues %s, node's replid is %s", info.ReplID, id)
	}
	replPoll(t, "the reader listed online with port 0", func() bool {
		s := replInfoField(t, c, "replication", "slave0")
		return strings.Contains(s, "port=0,") && strings.Contains(s, "state=online") && strings.Contains(s, "offset=0,")
	})

	db3, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, DisableCache: true, SelectDB: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer db3.Close()
	replDo(t, c, "HSET", "emq:{q}:job:J1", "state", "pending")
	replDo(t, c, "ZADD", "emq:{q}:pending", "0", "J1", "0", "J2")
	replDo(t, c, "ZPOPMIN", "emq:{q}:pending")
	replDo(t, c, "EVAL", "redis.call('ZADD', KEYS[1], 5, 'J3'); redis.call('HSET', KEYS[2], 'state', 'active'); return 1",
		"2", "emq:{q}:active", "emq:{q}:job:J3")
	replDo(t, c, "PUBLISH", "chan", "hello")
	replDo(t, db3, "SET", "k3", "v3")
	replDo(t, c, "SET", "marker", "1")
	replExpect(t, r,
		"db=0 HSET emq:{q}:job:J1 state pending",
		"db=0 ZADD emq:{q}:pending 0 J1 0 J2",
		"db=0 ZPOPMIN emq:{q}:pending",
		"db=0 ZADD emq:{q}:active 5 J3",
		"db=0 HSET emq:{q}:job:J3 state active",
		"db=0 PUBLISH chan hello",
		"db=3 SET k3 v3",
		"db=0 SET marker 1",
	)
}

// TestReplStreamDiskRDB joins a node that synchronises from a file, with
// the whole RDB (as from a node without rdb-filter-only): the RDB comes as
// $<length>, at least as long as the random data written before; a value
// past 1 MiB arrives whole.
func TestReplStreamDiskRDB(t *testing.T) { node.EachServer(t, testReplDiskRDB) }

func testReplDiskRDB(t *testing.T, srv node.Server) {
	n, c := replNode(t, srv, node.Bare, "repl-diskless-sync", "no")
	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	replDo(t, c, "SET", "random", string(big))
	ctx, cancel := context.WithTimeout(context.Background(), replWait)
	defer cancel()
	r, info, err := dialRepl(ctx, replOpts(n), false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !info.Full || info.Empty || r.rdbForm != "len" || info.Skipped < int64(len(big)) {
		t.Fatalf("join %+v, RDB framing %q: want a full synchronisation from a file of at least %d bytes", info, r.rdbForm, len(big))
	}
	replDo(t, c, "SET", "again", string(big))
	_, argv, err := r.next()
	if err != nil {
		t.Fatal(err)
	}
	if len(argv) != 3 || string(argv[0]) != "SET" || string(argv[1]) != "again" || !bytes.Equal(argv[2], big) {
		t.Fatalf("stream sent %d arguments, want SET again and the %d bytes", len(argv), len(big))
	}
}

// TestReplStreamPartial opens a second stream while a first one keeps the
// node's backlog: a partial resynchronisation from now, without a fork. It
// sees the writes made after it opened; the database is unknown (-1) until
// the stream names one, never guessed.
func TestReplStreamPartial(t *testing.T) { node.EachServer(t, testReplPartial) }

func testReplPartial(t *testing.T, srv node.Server) {
	n, c := replNode(t, srv, node.Bare, "repl-diskless-sync-delay", "0")
	r1, info1 := replOpen(t, n)
	if !info1.Full {
		t.Fatalf("first join %+v: want a full synchronisation", info1)
	}
	db3, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{n.Addr}, DisableCache: true, SelectDB: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer db3.Close()
	replDo(t, db3, "SET", "a", "1")
	replExpect(t, r1, "db=3 SET a 1")

	forks := replInfoField(t, c, "stats", "total_forks")
	off, _ := strconv.ParseInt(replInfoField(t, c, "replication", "master_repl_offset"), 10, 64)
	r2, info2 := replOpen(t, n)
	if info2.Full || info2.Skipped != 0 || info2.Offset < off+1 || info2.ReplID != info1.ReplID {
		t.Fatalf("second join %+v (first %+v, offset before %d): want a partial resynchronisation from the node's offset", info2, info1, off)
	}
	if got := replInfoField(t, c, "stats", "total_forks"); got != forks {
		t.Fatalf("total_forks went from %s to %s: the partial join forked", forks, got)
	}
	if got := replInfoField(t, c, "persistence", "rdb_bgsave_in_progress"); got != "0" {
		t.Fatalf("rdb_bgsave_in_progress:%s after a partial join", got)
	}
	replDo(t, db3, "SET", "b", "2") // the stream's database is still 3: no SELECT
	replDo(t, c, "SET", "c", "3")
	replExpect(t, r2, "db=-1 SET b 2", "db=0 SET c 3")
	replExpect(t, r1, "db=3 SET b 2", "db=0 SET c 3")
}

// TestReplStreamNotCountedByWait: WAIT never counts the reader as a replica
// that has a write, and the GETACK that WAIT puts into the stream is
// answered and consumed.
func TestReplStreamNotCountedByWait(t *testing.T) { node.EachServer(t, testReplWait) }

func testReplWait(t *testing.T, srv node.Server) {
	n, c := replNode(t, srv, node.Bare, "repl-diskless-sync-delay", "0")
	r, _ := replOpen(t, n)
	replPoll(t, "the reader online", func() bool {
		return strings.Contains(replInfoField(t, c, "replication", "slave0"), "state=online")
	})
	replDo(t, c, "SET", "x", "1")
	if got, err := replDo(t, c, "WAIT", "1", "100").AsInt64(); err != nil || got != 0 {
		t.Fatalf("WAIT 1 100 answered %d (%v), want 0", got, err)
	}
	replDo(t, c, "SET", "marker", "1")
	replExpect(t, r, "db=0 SET x 1", "db=0 SET marker 1")
	if r.getacks == 0 {
		t.Fatal("the stream carried no REPLCONF GETACK after WAIT")
	}
}

// TestReplStreamStaysLinked keeps a stream open past two periods of a
// short repl-timeout: the acknowledgements keep the node from dropping it,
// and a write made afterwards arrives.
//
// The reader acknowledges every second, as a replica does; the node drops
// a replica whose last acknowledgement is more than repl-timeout old. So
// the repl-timeout is the longest the test process (or the node) may be
// starved of the CPU without the node dropping the stream, whatever the
// reader does: 2 s left one second of it, which a loaded machine took
// (connected_slaves:0 beside the move tests). 4 s leaves three, and a
// reader that did not acknowledge would still be dropped within the wait
// (by repl-timeout and the node's once-a-second check).
func TestReplStreamStaysLinked(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testReplLinked)
}

func testReplLinked(t *testing.T, srv node.Server) {
	const timeout = 4 // repl-timeout, seconds
	n, c := replNode(t, srv, node.Bare, "repl-diskless-sync-delay", "0", "repl-timeout", strconv.Itoa(timeout), "repl-ping-replica-period", "1")
	r, _ := replOpen(t, n)
	opened := time.Now()
	wait := 2*timeout*time.Second + time.Second
	for time.Since(opened) < wait {
		if got := replInfoField(t, c, "replication", "connected_slaves"); got != "1" {
			t.Fatalf("connected_slaves:%s %v after the stream opened, at repl-timeout %d s (the node's log says why it dropped it)",
				got, time.Since(opened).Round(time.Millisecond), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	replDo(t, c, "SET", "late", "1")
	replExpect(t, r, "db=0 SET late 1")
	if r.pings == 0 {
		t.Fatalf("no PING consumed in %v at repl-ping-replica-period 1", wait)
	}
}

// TestReplStreamTLS reads the stream of a node through its TLS port, with
// a client certificate the node requires: the handshake, the full
// synchronisation and the commands that follow.
func TestReplStreamTLS(t *testing.T) {
	ca := node.NewCA(t, "emqproxy test CA")
	n, tlsAddr := node.StartTLS(t, ca, true, node.Options{Role: node.Bare,
		Args: []string{"--repl-diskless-sync-delay", "0"}})
	cert, _, _ := ca.Issue(t, "mover")
	o := replOpts(n)
	o.Address = tlsAddr
	o.TLS = &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	ctx, cancel := context.WithTimeout(context.Background(), replWait)
	defer cancel()
	r, info, err := openReplStream(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !info.Full || !info.Empty {
		t.Fatalf("join %+v: want a full synchronisation of an empty RDB", info)
	}
	c := n.Client(t)
	replDo(t, c, "SET", "over", "tls")
	replExpect(t, r, "db=0 SET over tls")

	// Without a certificate the node refuses the handshake.
	o.TLS = &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	if r2, _, err := openReplStream(ctx, o); err == nil {
		_ = r2.Close()
		t.Fatal("the stream opened without a client certificate")
	} else if !errors.Is(err, ErrReplStream) {
		t.Fatalf("without a client certificate: %v, want %v", err, ErrReplStream)
	}
}

// TestReplStreamRefused: a node with min-replicas-to-write, a replica and
// a master set under Sentinel are refused, each with its reason.
func TestReplStreamRefused(t *testing.T) { node.EachServer(t, testReplRefused) }

func testReplRefused(t *testing.T, srv node.Server) {
	ctx := context.Background()
	n, c := replNode(t, srv, node.Bare, "min-replicas-to-write", "1")
	_, _, err := openReplStream(ctx, replOpts(n))
	if !errors.Is(err, ErrReplRefused) || !strings.Contains(err.Error(), "min-replicas-to-write 1") {
		t.Fatalf("min-replicas-to-write 1: %v", err)
	}
	replDo(t, c, "CONFIG", "SET", "min-replicas-to-write", "0")
	rep := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path, ReplicaOf: n.Addr})
	_, _, err = openReplStream(ctx, replOpts(rep))
	if !errors.Is(err, ErrReplRefused) || !strings.Contains(err.Error(), "role:slave") {
		t.Fatalf("a replica: %v", err)
	}
	o := replOpts(n)
	o.Sentinel = &discovery.Options{Master: "mymaster"}
	_, _, err = openReplStream(ctx, o)
	if !errors.Is(err, ErrReplRefused) || !strings.Contains(err.Error(), "Sentinel") {
		t.Fatalf("a Sentinel master set: %v", err)
	}
}

// TestReplStreamEnds: a stream the node kills, one that goes silent (a
// frozen node) and one closed while next waits each end next with an
// error, never a hang; after Close next keeps failing.
func TestReplStreamEnds(t *testing.T) { node.EachServer(t, testReplEnds) }

func testReplEnds(t *testing.T, srv node.Server) {
	n, c := replNode(t, srv, node.Bare, "repl-diskless-sync-delay", "0")
	waitErr := func(r *replStream, act func()) error {
		t.Helper()
		ch := make(chan error, 1)
		go func() {
			for {
				if _, _, err := r.next(); err != nil {
					ch <- err
					return
				}
			}
		}()
		act()
		select {
		case err := <-ch:
			if !errors.Is(err, ErrReplStream) {
				t.Fatalf("next: %v, want ErrReplStream", err)
			}
			return err
		case <-time.After(replWait):
			t.Fatalf("next still waits %v later", replWait)
		}
		return nil
	}

	r, _ := replOpen(t, n)
	err := waitErr(r, func() { replDo(t, c, "CLIENT", "KILL", "TYPE", "replica") })
	t.Logf("killed: %v", err)

	r, _ = replOpen(t, n)
	r.idle.Store(int64(time.Second)) // the node's 60 s would make a slow test
	if err := n.Freeze(); err != nil {
		t.Fatal(err)
	}
	err = waitErr(r, func() {})
	if err := n.Thaw(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(err.Error(), "nothing arrived") {
		t.Fatalf("frozen node: %v", err)
	}

	r, _ = replOpen(t, n)
	waitErr(r, func() { _ = r.Close() })
	if _, _, err := r.next(); !errors.Is(err, ErrReplStream) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("next after Close: %v", err)
	}
}

// TestReplStreamModuleWrites: a module command's effects reach the stream
// as the plain commands the module calls, never as EMQ.*.
func TestReplStreamModuleWrites(t *testing.T) { node.EachServer(t, testReplModule) }

func testReplModule(t *testing.T, srv node.Server) {
	n, c := replNode(t, srv, node.Module, "repl-diskless-sync-delay", "0")
	r, _ := replOpen(t, n)
	if got, err := replDo(t, c, "EMQ.ENQUEUE", "2", "emq:{q}:job:J1", "emq:{q}:pending", "J1", "body").AsInt64(); err != nil || got != 1 {
		t.Fatalf("EMQ.ENQUEUE answered %d (%v)", got, err)
	}
	replDo(t, c, "SET", "marker", "1")
	replExpect(t, r,
		"db=0 HSET emq:{q}:job:J1 state pending attempts 0 payload body",
		"db=0 ZADD emq:{q}:pending 0 J1",
		"db=0 SET marker 1",
	)
}

// TestReplFramingBounds feeds the stream's framing what a node never sends:
// every length past its bound is an error that names it, before any
// allocation of that size.
func TestReplFramingBounds(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"*2000000\r\n", "past the bound of 1048576"},
		{"*1\r\n$600000000\r\n", "past the bound of 536870912"},
		{"*1\r\n$-1\r\n", "nil bulk"},
		{"*1\r\n:1\r\n", "not a bulk string"},
		{"*1\r\n$3\r\nabcXY", "not followed by CRLF"},
		{"*x\r\n", "has no length"},
		{"*1\r\n$3\r\nab", "closed the connection"},
		{strings.Repeat("a", replMaxLine+10) + "\r\n", "longer than"},
	} {
		r := &replStream{name: "test", idle: new(atomic.Int64), db: dbUnknown,
			br: bufio.NewReaderSize(strings.NewReader(c.in), replMaxLine)}
		_, _, err := r.next()
		if !errors.Is(err, ErrReplStream) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", clip([]byte(c.in)), err, c.want)
		}
	}
	r := &replStream{name: "test", idle: new(atomic.Int64), db: dbUnknown,
		br: bufio.NewReaderSize(strings.NewReader("\r\nPING\r\nSELECT 2\r\nSET a  b\r\n*0\r\n"), replMaxLine)}
	db, argv, err := r.next()
	if err != nil || db != 2 || fmt.Sprintf("%q", argv) != `["SET" "a" "b"]` {
		t.Fatalf("inline commands: db %d, %q, %v", db, argv, err)
	}
}

// TestReplStreamOpenCancelled: the context bounds the opening, also while
// the node delays a full synchronisation (repl-diskless-sync-delay, 5 s by
// default) and sends only newlines.
func TestReplStreamOpenCancelled(t *testing.T) { node.EachServer(t, testReplOpenCancelled) }

func testReplOpenCancelled(t *testing.T, srv node.Server) {
	n, _ := replNode(t, srv, node.Bare)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r, info, err := openReplStream(ctx, replOpts(n))
	if err == nil {
		_ = r.Close()
		t.Fatalf("opened %+v after the context ended", info)
	}
	if !errors.Is(err, ErrReplStream) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open: %v, want ErrReplStream and the context's deadline", err)
	}
}
