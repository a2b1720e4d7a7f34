package keycopy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/internal/controltest"
	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/node"
)

// fillRows writes n job rows of queue q on src and returns their keys.
func fillRows(t *testing.T, src *table.Node, q string, n int) []string {
	t.Helper()
	b := src.C.B()
	var keys []string
	for lo := 0; lo < n; lo += 500 {
		var cmds valkey.Commands
		for i := lo; i < min(lo+500, n); i++ {
			k := fmt.Sprintf("emq:{%s}:job:%d", q, i)
			keys = append(keys, k)
			cmds = append(cmds, b.Hset().Key(k).FieldValue().FieldValue("state", "pending").FieldValue("payload", strings.Repeat("p", 64+i%32)).Build())
		}
		controltest.Must(t, src.C, cmds...)
	}
	return keys
}

// listen returns what the copy told its mover so far (Copier.Tell).
func listen(cp *Copier) func() []string {
	var mu sync.Mutex
	var said []string
	cp.Tell(func(f string, a ...any) {
		mu.Lock()
		said = append(said, fmt.Sprintf(f, a...))
		mu.Unlock()
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(said)
	}
}

// nodeClient is a client of n's server of its own, which pauses the
// node's writes (CLIENT PAUSE WRITE) and closes every other normal
// connection (CLIENT KILL TYPE normal SKIPME yes): a round trip of writes
// sent meanwhile is cut while the node holds it.
type nodeClient struct{ c valkey.Client }

func newNodeClient(t *testing.T, n *table.Node) nodeClient {
	t.Helper()
	k, err := table.Dial(n.Opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return nodeClient{k.C}
}

func (k nodeClient) pauseWrites(d time.Duration) {
	_ = k.c.Do(context.Background(), k.c.B().ClientPause().Timeout(d.Milliseconds()).Write().Build()).Error()
}

func (k nodeClient) killOthers() {
	_ = k.c.Do(context.Background(), k.c.B().Arbitrary("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Build()).Error()
}

// TestCopyOutlivesClosedConnections copies 20k rows, as the first round
// does, while both nodes close the copy's connections every few tens of
// milliseconds, the target with a round trip of writes held: the copy
// sends the cut round trips again and ends equal to the source, with the
// target's keys counted exactly once recounted.
func TestCopyOutlivesClosedConnections(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		src, dst := controltest.Pair(t, srv)
		ctx := context.Background()
		keys := fillRows(t, src, "q", 20000)
		cp := NewCopier(src, dst, "q", 0, DefaultLargeKey, 0, nil)
		said := listen(cp)
		if err := cp.DialRows(); err != nil {
			t.Fatal(err)
		}
		defer cp.Close()
		onSrc, onDst := newNodeClient(t, src), newNodeClient(t, dst)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(15 * time.Millisecond):
				}
				if i%2 == 0 {
					onDst.pauseWrites(30 * time.Millisecond)
					time.Sleep(10 * time.Millisecond)
					onDst.killOthers()
				} else {
					onSrc.killOthers()
				}
			}
		})
		pages := make(chan []string, 1)
		pages <- keys
		close(pages)
		large, err := cp.CopyStream(ctx, pages, false, true)
		close(stop)
		wg.Wait()
		if err != nil || len(large) != 0 {
			t.Fatal(large, err)
		}
		cp.St.Mu.Lock()
		redone := cp.St.Redone
		cp.St.Mu.Unlock()
		if redone == 0 {
			t.Fatal("no round trip was sent again: the kills cut none")
		}
		t.Logf("%d round trips sent again; first: %s", redone, said()[0])
		// The last kill left each node's clients a closed connection,
		// which their next command finds (and reconnects after).
		_ = src.C.Do(ctx, src.C.B().Ping().Build()).Error()
		_ = dst.C.Do(ctx, dst.C.B().Ping().Build()).Error()
		equalKeys(t, cp, keys)
		if err := cp.Recount(ctx); err != nil {
			t.Fatal(err)
		}
		if cp.Inv.Keys != 20000 || cp.Inv.Rows != 20000 || cp.Inv.Unsure {
			t.Errorf("inventory %d keys, %d rows (unsure %v); want 20000 of each", cp.Inv.Keys, cp.Inv.Rows, cp.Inv.Unsure)
		}
		if err := cp.SameServers(ctx); err != nil {
			t.Errorf("the same two servers, after connections closed: %v", err)
		}
	})
}

// TestCopyStopsWhenTheTargetIsAnotherServer: a target whose replication id
// changed since the copy began (it was a replica and was promoted, as in a
// failover) may have lost what the copy wrote, so a round trip cut on it
// is not sent again and the copy stops.
func TestCopyStopsWhenTheTargetIsAnotherServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		src, dst := controltest.Pair(t, srv)
		ctx := context.Background()
		keys := fillRows(t, src, "q", 4000)
		cp := NewCopier(src, dst, "q", 0, DefaultLargeKey, 0, nil)
		said := listen(cp)
		if _, err := cp.CopyKeys(ctx, keys[:1000], false); err != nil {
			t.Fatal(err)
		}
		// The target follows another server, then is promoted: a new
		// replication id.
		// (Another server than the source: a master's replication id
		// changes when its first replica attaches.)
		other := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		host, port, _ := strings.Cut(other.Addr, ":")
		controltest.Must(t, dst.C, dst.C.B().Replicaof().Host(host).Port(atoi(t, port)).Build())
		deadline := time.Now().Add(20 * time.Second)
		for {
			info, _ := dst.C.Do(ctx, dst.C.B().Info().Section("replication").Build()).ToString()
			if strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the target did not sync: %s", info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		controltest.Must(t, dst.C, dst.C.B().Replicaof().No().One().Build())
		on := newNodeClient(t, dst)
		on.pauseWrites(500 * time.Millisecond)
		done := make(chan error, 1)
		go func() {
			_, err := cp.CopyKeys(ctx, keys[1000:], false)
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		on.killOthers()
		err := <-done
		if err == nil {
			t.Fatal("the copy went on on a target that is another server")
		}
		t.Logf("the copy stopped: %v", err)
		if cp.St.Redone != 0 {
			t.Errorf("%d round trips sent again to a promoted target", cp.St.Redone)
		}
		if got := said(); len(got) != 1 || !strings.Contains(got[0], "dst is not the server the copy began on") {
			t.Errorf("the copy said %q", got)
		}
		// The mover's check before and under the hold finds it too.
		_ = dst.C.Do(ctx, dst.C.B().Ping().Build()).Error() // the connection the kill closed
		if err := cp.SameServers(ctx); err == nil || !strings.Contains(err.Error(), "dst is not the server the copy began on") {
			t.Errorf("SameServers on a promoted target: %v", err)
		}
	})
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
