package control

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/node"
)

// pair is a source and a target node of one server, as control nodes.
func pair(t *testing.T, srv node.Server) (*Node, *Node) {
	t.Helper()
	var out []*Node
	for _, name := range []string{"src", "dst"} {
		n := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		c, err := Dial(NodeOptions{Name: name, Address: n.Addr, Password: n.Opts.Password})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		// A mover joining a node without a backlog waits the server's
		// repl-diskless-sync-delay (5 s) for its full synchronisation:
		// nothing a test here looks at.
		must(t, c.C, c.C.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", "0").Build())
		out = append(out, c)
	}
	return out[0], out[1]
}

func must(t *testing.T, c valkey.Client, cmds ...valkey.Completed) {
	t.Helper()
	for _, r := range c.DoMulti(context.Background(), cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// fillLarge writes a large sorted set (ties, negative, fractional and
// infinite scores), hash, set, list (with repeats) and string under queue
// q, the hash with a TTL.
func fillLarge(t *testing.T, n *Node, q string, size int) []string {
	t.Helper()
	p := "emq:{" + q + "}:"
	b := n.C.B()
	var cmds valkey.Commands
	for lo := 0; lo < size; lo += 500 {
		z := b.Zadd().Key(p + "pending").ScoreMember()
		h := b.Hset().Key(p + "h").FieldValue()
		var members, elems []string
		for i := lo; i < min(lo+500, size); i++ {
			score := float64(i%97) - 40.5
			switch i % 1000 {
			case 1:
				score = math.Inf(1)
			case 2:
				score = math.Inf(-1)
			case 3:
				score = 1e300 / 3
			}
			z = z.ScoreMember(score, fmt.Sprintf("J%07d", i))
			h = h.FieldValue(fmt.Sprintf("f%d", i), strings.Repeat("v", i%50))
			members = append(members, fmt.Sprintf("m%d", i))
			elems = append(elems, fmt.Sprintf("e%d", i%300))
		}
		cmds = append(cmds, z.Build(), h.Build(), b.Sadd().Key(p+"s").Member(members...).Build(), b.Rpush().Key(p+"l").Element(elems...).Build())
	}
	cmds = append(cmds, b.Set().Key(p+"str").Value(strings.Repeat("0123456789abcdef", 64<<10)).Build(),
		b.Pexpire().Key(p+"h").Milliseconds(600_000).Build())
	must(t, n.C, cmds...)
	return []string{p + "pending", p + "h", p + "s", p + "l", p + "str"}
}

// equalKeys fails the test unless every key has the same content on both
// nodes. The keys are compared by several workers at once: a queue of
// 100k keys read one round trip at a time took most of a minute under the
// race detector, and the client pipelines concurrent reads.
func equalKeys(t *testing.T, cp *copier, keys []string) {
	t.Helper()
	ctx := context.Background()
	const workers = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		next     atomic.Int64
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(keys); i = int(next.Add(1) - 1) {
				k := keys[i]
				a, err := cp.content(ctx, cp.src, k)
				var b string
				if err == nil {
					b, err = cp.content(ctx, cp.dst, k)
				}
				switch {
				case err != nil:
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				case a != b:
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s differs: source %d bytes of content, target %d", k, len(a), len(b)))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(failures)
	for _, f := range failures {
		t.Error(f)
	}
}

// TestChunkedCopyEqualsSource copies a large sorted set, hash, set, list and
// string in chunks, then changes each on the source and brings the target
// level again by comparison: each time the target equals the source, no
// temporary key is left, the TTL came along, and no command carried more
// than a chunk.
func TestChunkedCopyEqualsSource(t *testing.T) { node.EachServer(t, testChunkedCopy) }

func testChunkedCopy(t *testing.T, srv node.Server) {
	src, dst := pair(t, srv)
	ctx := context.Background()
	keys := fillLarge(t, src, "big", 6000)
	cp := newCopier(src, dst, "big", 0, 4<<10, 200, nil)
	large, err := cp.copyKeys(ctx, keys, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(large) != len(keys) {
		t.Fatalf("large keys %v, want all of %v", large, keys)
	}
	for _, k := range large {
		res, err := cp.syncLarge(ctx, k, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if !res.copied {
			t.Errorf("%s was not copied in chunks: %+v", k, res)
		}
	}
	equalKeys(t, cp, keys)
	if cp.st.chunked != int64(len(keys)) {
		t.Errorf("%d keys copied in chunks, want %d", cp.st.chunked, len(keys))
	}
	if ttl, _ := dst.C.Do(ctx, dst.C.B().Pttl().Key("emq:{big}:h").Build()).AsInt64(); ttl < 500_000 || ttl > 600_000 {
		t.Errorf("the hash's TTL on the target is %dms", ttl)
	}
	if left, _ := scanQueue(ctx, dst, "big", 0); len(left) != len(keys) {
		t.Errorf("target keys %v, want exactly %v", left, keys)
	}

	// Change every key on the source; the comparison patches the target.
	p := "emq:{big}:"
	b := src.C.B()
	z := b.Zadd().Key(p + "pending").ScoreMember()
	for i := 0; i < 300; i++ {
		z = z.ScoreMember(float64(i)*1.5, fmt.Sprintf("J%07d", i*7)) // new scores
	}
	must(t, src.C, z.Build(),
		b.Zadd().Key(p+"pending").ScoreMember().ScoreMember(-1, "NEW-1").ScoreMember(1e9, "NEW-2").Build(),
		b.Zrem().Key(p+"pending").Member("J0000001", "J0005999", "J0003000").Build(),
		b.Hset().Key(p+"h").FieldValue().FieldValue("f10", "changed").FieldValue("fnew", "x").Build(),
		b.Hdel().Key(p+"h").Field("f11", "f12").Build(),
		b.Sadd().Key(p+"s").Member("m-new").Build(),
		b.Srem().Key(p+"s").Member("m5").Build(),
		b.Lset().Key(p+"l").Index(4000).Element("changed").Build(),
		b.Setrange().Key(p+"str").Offset(700_000).Value("CHANGED").Build())
	for _, k := range keys {
		res, err := cp.syncLarge(ctx, k, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.diffs == 0 {
			t.Errorf("%s: the comparison found no difference", k)
		}
	}
	equalKeys(t, cp, keys)
	for _, k := range keys {
		if res, err := cp.syncLarge(ctx, k, false, false); err != nil || res.diffs != 0 || res.copied {
			t.Errorf("%s compared again: %+v %v", k, res, err)
		}
	}
	for _, rt := range cp.st.roundTrips() {
		t.Logf("longest round trip to %s: %v (%s, %d commands)", rt.Node, rt.Took, rt.What, rt.Commands)
		if rt.Commands > 8 {
			t.Errorf("a chunked copy pipelined %d commands to %s", rt.Commands, rt.Node)
		}
	}
	if left, _ := scanQueue(ctx, dst, "big", 0); len(left) != len(keys) {
		t.Errorf("target keys after the comparisons %v", left)
	}
}

// TestSmallKeysCopyAndVerify copies small keys of every type pipelined
// (with a TTL), deletes on the target the keys gone from the source, and
// counts the queue's keys as it goes.
func TestSmallKeysCopyAndVerify(t *testing.T) { node.EachServer(t, testSmallKeys) }

func testSmallKeys(t *testing.T, srv node.Server) {
	src, dst := pair(t, srv)
	ctx := context.Background()
	p := "emq:{q}:"
	b := src.C.B()
	must(t, src.C,
		b.Hset().Key(p+"job:1").FieldValue().FieldValue("state", "pending").FieldValue("payload", "x").Build(),
		b.Hset().Key(p+"job:2").FieldValue().FieldValue("state", "done").Build(),
		b.Zadd().Key(p+"pending").ScoreMember().ScoreMember(0, "1").Build(),
		b.Set().Key(p+"paused").Value("1").Px(90*time.Second).Build(),
		b.Sadd().Key(p+"tags").Member("a", "b").Build(),
		b.Rpush().Key(p+"log").Element("x", "y").Build())
	keys := []string{p + "job:1", p + "job:2", p + "pending", p + "paused", p + "tags", p + "log"}
	cp := newCopier(src, dst, "q", 0, DefaultLargeKey, 0, nil)
	large, err := cp.copyKeys(ctx, keys, false)
	if err != nil || len(large) != 0 {
		t.Fatal(large, err)
	}
	equalKeys(t, cp, keys)
	if cp.inv.keys != 6 || cp.inv.rows != 2 || len(cp.inv.other) != 2 {
		t.Errorf("inventory %d keys, %d rows, other %v", cp.inv.keys, cp.inv.rows, cp.inv.other)
	}
	// A key deleted on the source is deleted on the target when copied again.
	must(t, src.C, b.Del().Key(p+"job:2").Build())
	if _, err := cp.copyKeys(ctx, []string{p + "job:2", p + "job:2"}, false); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := dst.C.Do(ctx, dst.C.B().Pttl().Key(p+"paused").Build()).AsInt64(); ttl < 60_000 || ttl > 90_000 {
		t.Errorf("paused's TTL on the target: %dms", ttl)
	}
	if n, _ := dst.C.Do(ctx, dst.C.B().Exists().Key(p+"job:2").Build()).AsInt64(); n != 0 {
		t.Errorf("a key deleted on the source stayed on the target")
	}
	if cp.inv.keys != 5 || cp.inv.rows != 1 || len(cp.inv.other) != 2 {
		t.Errorf("inventory %d keys, %d rows, other %v", cp.inv.keys, cp.inv.rows, cp.inv.other)
	}
}
