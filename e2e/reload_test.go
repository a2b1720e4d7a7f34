package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestReloadUnderLoad swaps the map while clients keep sending rewritten
// calls: no command is lost, and each connection's audit records carry the
// old map's digest up to the swap and the new one after it, never back.
func TestReloadUnderLoad(t *testing.T) { node.EachServer(t, testReloadUnderLoad) }

func testReloadUnderLoad(t *testing.T, server node.Server) {
	const (
		clients = 8
		jobs    = 400
	)
	data, err := os.ReadFile(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	oldMap, err := shamap.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	newMap, err := shamap.Parse([]byte(strings.Replace(string(data), "source:", "source: next-release #", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if oldMap.Digest == newMap.Digest {
		t.Fatal("the two maps have one digest")
	}

	n := node.StartT(t, node.Options{Server: server.Path, Role: node.Module})
	sink := &AuditSink{}
	srv, addr := ServeProxy(t, proxy.Options{
		Upstream: proxy.UpstreamOptions{Name: "module", Address: n.Addr},
		OnConnect: func(ctx context.Context, c fence.Conn) error {
			_, err := fence.CheckModule(ctx, c, oldMap, false)
			return err
		},
		Policy: &rewrite.Policy{Map: oldMap},
	}, sink.Logger())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := WaitFor(ctx, srv.Ready); err != nil {
		t.Fatalf("proxy never ready: %v", srv.Readiness())
	}

	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := legacy.Dial(ctx, legacy.Options{Addr: addr, Map: oldMap})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			q := fmt.Sprintf("reload%d", i)
			for j := range jobs {
				ok, err := c.Enqueue(ctx, q, fmt.Sprintf("J%04d", j), "p")
				if err != nil || !ok {
					errs <- fmt.Errorf("client %d enqueue %d: %v %v", i, j, ok, err)
					return
				}
				acked.Add(1)
			}
		}()
	}
	// Swap once the clients are well under way.
	if err := WaitFor(ctx, func() bool { return acked.Load() >= clients*jobs/3 }); err != nil {
		t.Fatal("the clients never got going")
	}
	next := *srv.Policy()
	next.Map = newMap
	srv.SwapPolicy(&next)
	swappedAt := acked.Load()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if got := acked.Load(); got != clients*jobs {
		t.Fatalf("%d enqueues acknowledged, want %d", got, clients*jobs)
	}
	for i := range clients {
		b, err := node.RawDo(n.Addr, "ZCARD", fmt.Sprintf("emq:{reload%d}:pending", i))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != fmt.Sprintf(":%d\r\n", jobs) {
			t.Errorf("queue reload%d holds %q jobs, want %d", i, b, jobs)
		}
	}

	// Every rewrite was audited once; per connection the digest moves from
	// old to new exactly once and never back.
	seen := map[float64]string{}
	counts := map[string]int{}
	rewrites := 0
	for _, rec := range sink.Records() {
		if rec["msg"] != "rewrite" {
			continue
		}
		rewrites++
		digest, _ := rec["map"].(string)
		conn, _ := rec["conn"].(float64)
		counts[digest]++
		switch prev := seen[conn]; {
		case digest != oldMap.Digest && digest != newMap.Digest:
			t.Fatalf("audit record with digest %q, neither map's", digest)
		case prev == newMap.Digest && digest == oldMap.Digest:
			t.Fatalf("connection %v went back to the old map after the swap", conn)
		}
		seen[conn] = digest
	}
	if rewrites != clients*jobs {
		t.Errorf("%d rewrite records, want %d", rewrites, clients*jobs)
	}
	if counts[oldMap.Digest] == 0 || counts[newMap.Digest] == 0 {
		t.Errorf("records per digest %v: the swap is not visible in the audit log", counts)
	}
	t.Logf("swap after %d of %d enqueues; records: %d on the old map, %d on the new",
		swappedAt, clients*jobs, counts[oldMap.Digest], counts[newMap.Digest])
}
