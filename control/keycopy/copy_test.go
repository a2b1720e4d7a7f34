package keycopy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/internal/controltest"

	"github.com/emqproxy/emqproxy/stand/node"
)

// equalKeys fails the test unless every key has the same content on both
// nodes.
func equalKeys(t *testing.T, cp *Copier, keys []string) {
	t.Helper()
	controltest.EqualKeys(t, Content, cp.Src, cp.Dst, keys)
}

// TestChunkedCopyEqualsSource copies a large sorted set, hash, set, list and
// string in chunks, then changes each on the source and brings the target
// level again by comparison: each time the target equals the source, no
// temporary key is left, the TTL came along, and no command carried more
// than a chunk. A sorted set is written in descending order as a whole,
// and, past the bound of what the copy sorts, the rest as scanned.
func TestChunkedCopyEqualsSource(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		t.Run("sorted", func(t *testing.T) { testChunkedCopy(t, srv, zsortBytes) })
		t.Run("past the sort's bound", func(t *testing.T) { testChunkedCopy(t, srv, 150<<10) })
	})
}

func testChunkedCopy(t *testing.T, srv node.Server, sortBytes int) {
	src, dst := controltest.Pair(t, srv)
	ctx := context.Background()
	keys := controltest.FillLarge(t, src, "big", 6000)
	cp := NewCopier(src, dst, "big", 0, 4<<10, 200, nil)
	cp.zsortBytes = sortBytes
	large, err := cp.CopyKeys(ctx, keys, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(large) != len(keys) {
		t.Fatalf("large keys %v, want all of %v", large, keys)
	}
	for _, k := range large {
		res, err := cp.SyncLarge(ctx, k, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Copied {
			t.Errorf("%s was not copied in chunks: %+v", k, res)
		}
	}
	equalKeys(t, cp, keys)
	if cp.St.Chunked != int64(len(keys)) {
		t.Errorf("%d keys copied in chunks, want %d", cp.St.Chunked, len(keys))
	}
	if ttl, _ := dst.C.Do(ctx, dst.C.B().Pttl().Key("emq:{big}:h").Build()).AsInt64(); ttl < 500_000 || ttl > 600_000 {
		t.Errorf("the hash's TTL on the target is %dms", ttl)
	}
	if left, _ := ScanQueue(ctx, dst, "big", 0); len(left) != len(keys) {
		t.Errorf("target keys %v, want exactly %v", left, keys)
	}

	// Change every key on the source; the comparison patches the target.
	p := "emq:{big}:"
	b := src.C.B()
	z := b.Zadd().Key(p + "pending").ScoreMember()
	for i := 0; i < 300; i++ {
		z = z.ScoreMember(float64(i)*1.5, fmt.Sprintf("J%07d", i*7)) // new scores
	}
	controltest.Must(t, src.C, z.Build(),
		b.Zadd().Key(p+"pending").ScoreMember().ScoreMember(-1, "NEW-1").ScoreMember(1e9, "NEW-2").Build(),
		b.Zrem().Key(p+"pending").Member("J0000001", "J0005999", "J0003000").Build(),
		b.Hset().Key(p+"h").FieldValue().FieldValue("f10", "changed").FieldValue("fnew", "x").Build(),
		b.Hdel().Key(p+"h").Field("f11", "f12").Build(),
		b.Sadd().Key(p+"s").Member("m-new").Build(),
		b.Srem().Key(p+"s").Member("m5").Build(),
		b.Lset().Key(p+"l").Index(4000).Element("changed").Build(),
		b.Setrange().Key(p+"str").Offset(700_000).Value("CHANGED").Build())
	for _, k := range keys {
		res, err := cp.SyncLarge(ctx, k, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Diffs == 0 {
			t.Errorf("%s: the comparison found no difference", k)
		}
	}
	equalKeys(t, cp, keys)
	for _, k := range keys {
		if res, err := cp.SyncLarge(ctx, k, false, false); err != nil || res.Diffs != 0 || res.Copied {
			t.Errorf("%s compared again: %+v %v", k, res, err)
		}
	}
	for _, rt := range cp.St.RoundTrips() {
		t.Logf("longest round trip to %s: %v (%s, %d commands)", rt.Node, rt.Took, rt.What, rt.Commands)
		if rt.Commands > 8 {
			t.Errorf("a chunked copy pipelined %d commands to %s", rt.Commands, rt.Node)
		}
	}
	if left, _ := ScanQueue(ctx, dst, "big", 0); len(left) != len(keys) {
		t.Errorf("target keys after the comparisons %v", left)
	}
}

// TestSmallKeysCopyAndVerify copies small keys of every type pipelined
// (with a TTL), deletes on the target the keys gone from the source, and
// counts the queue's keys as it goes.
func TestSmallKeysCopyAndVerify(t *testing.T) { node.EachServer(t, testSmallKeys) }

func testSmallKeys(t *testing.T, srv node.Server) {
	src, dst := controltest.Pair(t, srv)
	ctx := context.Background()
	p := "emq:{q}:"
	b := src.C.B()
	controltest.Must(t, src.C,
		b.Hset().Key(p+"job:1").FieldValue().FieldValue("state", "pending").FieldValue("payload", "x").Build(),
		b.Hset().Key(p+"job:2").FieldValue().FieldValue("state", "done").Build(),
		b.Zadd().Key(p+"pending").ScoreMember().ScoreMember(0, "1").Build(),
		b.Set().Key(p+"paused").Value("1").Px(90*time.Second).Build(),
		b.Sadd().Key(p+"tags").Member("a", "b").Build(),
		b.Rpush().Key(p+"log").Element("x", "y").Build())
	keys := []string{p + "job:1", p + "job:2", p + "pending", p + "paused", p + "tags", p + "log"}
	cp := NewCopier(src, dst, "q", 0, DefaultLargeKey, 0, nil)
	large, err := cp.CopyKeys(ctx, keys, false)
	if err != nil || len(large) != 0 {
		t.Fatal(large, err)
	}
	equalKeys(t, cp, keys)
	if cp.Inv.Keys != 6 || cp.Inv.Rows != 2 || len(cp.Inv.Other) != 2 {
		t.Errorf("inventory %d keys, %d rows, other %v", cp.Inv.Keys, cp.Inv.Rows, cp.Inv.Other)
	}
	// A key deleted on the source is deleted on the target when copied again.
	controltest.Must(t, src.C, b.Del().Key(p+"job:2").Build())
	if _, err := cp.CopyKeys(ctx, []string{p + "job:2", p + "job:2"}, false); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := dst.C.Do(ctx, dst.C.B().Pttl().Key(p+"paused").Build()).AsInt64(); ttl < 60_000 || ttl > 90_000 {
		t.Errorf("paused's TTL on the target: %dms", ttl)
	}
	if n, _ := dst.C.Do(ctx, dst.C.B().Exists().Key(p+"job:2").Build()).AsInt64(); n != 0 {
		t.Errorf("a key deleted on the source stayed on the target")
	}
	if cp.Inv.Keys != 5 || cp.Inv.Rows != 1 || len(cp.Inv.Other) != 2 {
		t.Errorf("inventory %d keys, %d rows, other %v", cp.Inv.Keys, cp.Inv.Rows, cp.Inv.Other)
	}
}

// TestFreshCopyWritesOverWhatTheTargetHas copies as the first round does
// (CopyStream fresh, on the rows' own connections): a key the target has
// after all (copied before, as when a scan returns a key twice) answers
// BUSYKEY to the lone RESTORE and is written over, a key gone from the
// source is deleted on the target, and the inventory counts each key once.
func TestFreshCopyWritesOverWhatTheTargetHas(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		src, dst := controltest.Pair(t, srv)
		ctx := context.Background()
		p := "emq:{q}:"
		b := src.C.B()
		var keys []string
		for i := range 600 {
			k := fmt.Sprintf("%sjob:%d", p, i)
			keys = append(keys, k)
			controltest.Must(t, src.C, b.Hset().Key(k).FieldValue().FieldValue("state", "pending").FieldValue("n", fmt.Sprint(i)).Build())
		}
		cp := NewCopier(src, dst, "q", 0, DefaultLargeKey, 0, nil)
		if err := cp.DialRows(); err != nil {
			t.Fatal(err)
		}
		defer cp.Close()
		// Copied once already: a row that changes on the source after, and
		// one deleted there.
		if _, err := cp.CopyKeys(ctx, []string{keys[10], keys[300]}, false); err != nil {
			t.Fatal(err)
		}
		controltest.Must(t, src.C, b.Hset().Key(keys[10]).FieldValue().FieldValue("state", "active").Build(), b.Del().Key(keys[300]).Build())
		pages := make(chan []string, 2)
		pages <- keys[:400]
		pages <- keys[400:]
		close(pages)
		if large, err := cp.CopyStream(ctx, pages, false, true); err != nil || len(large) != 0 {
			t.Fatal(large, err)
		}
		equalKeys(t, cp, keys)
		if cp.Inv.Keys != 599 || cp.Inv.Rows != 599 {
			t.Errorf("inventory %d keys, %d rows; want 599 of each", cp.Inv.Keys, cp.Inv.Rows)
		}
		if n, _ := dst.C.Do(ctx, dst.C.B().Dbsize().Build()).AsInt64(); n != 599 {
			t.Errorf("the target has %d keys, want 599", n)
		}
	})
}

// TestPacedChunkedCopyReadsTheSourceAtTheRate: a sorted set copied in
// chunks at --rate is gathered before it is written, and the pace is taken
// on the source's reads: midway through the copy, the source has served
// about half of the scan (the scan runs up to zdepth pages ahead), not all
// of it.
func TestPacedChunkedCopyReadsTheSourceAtTheRate(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		src, dst := controltest.Pair(t, srv)
		ctx := context.Background()
		controltest.FillLarge(t, src, "big", 30000)
		k := "emq:{big}:pending"
		zs, err := src.C.Do(ctx, src.C.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, z := range zs {
			size += len(z.Member) + len(strconv.FormatFloat(z.Score, 'f', -1, 64))
		}
		// About 1.5 s of reads at the rate, past the limiter's burst (a
		// tenth of a second's worth).
		rate := int64(size) * 2 / 3
		cp := NewCopier(src, dst, "big", rate, 4<<10, 200, nil)
		scans := func() int64 {
			info, err := src.C.Do(ctx, src.C.B().Info().Section("commandstats").Build()).ToString()
			if err != nil {
				t.Fatal(err)
			}
			_, after, ok := strings.Cut(info, "cmdstat_zscan:calls=")
			if !ok {
				return 0
			}
			n, _ := strconv.ParseInt(after[:strings.IndexByte(after, ',')], 10, 64)
			return n
		}
		done := make(chan error, 1)
		t0 := time.Now()
		go func() {
			_, err := cp.SyncLarge(ctx, k, true, false)
			done <- err
		}()
		time.Sleep(600 * time.Millisecond)
		mid := scans()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		took, all := time.Since(t0), scans()
		t.Logf("%d bytes at %d B/s: %d of %d ZSCANs after 0.6 s, copied in %v", size, rate, mid, all, took)
		if took < time.Second {
			t.Errorf("the copy took %v, want at least 1 s at the rate", took)
		}
		if all < 100 || mid*3 > all*2 {
			t.Errorf("%d of %d ZSCANs were served in the first 0.6 s of about 1.5 s", mid, all)
		}
		equalKeys(t, cp, []string{k})
	})
}
