package keycopy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/internal/controltest"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestPatchesFollowConcurrentWrites: large keys are copied in chunks while
// writers change them (pops from both ends, new members, removals, new
// scores, a script that pops and re-adds as CLAIM does, hash fields set,
// incremented and deleted, set members added, removed and popped); rounds
// of patches from the replication stream's member-level changes then
// bring the target level, and once the writers stop one more patch leaves
// the target equal to the source, with equal sizes. The last patch's work
// follows the last writes, not the keys' sizes.
func TestPatchesFollowConcurrentWrites(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testPatches)
}

func testPatches(t *testing.T, srv node.Server) {
	src, dst := controltest.Pair(t, srv)
	ctx := context.Background()
	const q, size = "pq", 20000
	p := "emq:{" + q + "}:"
	keys := controltest.FillLarge(t, src, q, size)
	tr, err := tail.StartTracker(ctx, src, q, tail.TrackReplication)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Stop(ctx) }()
	if !tr.MemberLevel() {
		t.Fatalf("the tracker does not read the replication stream: %s", tr.Source())
	}
	t.Logf("tracking: %s", tr.Source())
	cp := NewCopier(src, dst, q, 0, 4<<10, 200, tr)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes int64
	var wmu sync.Mutex
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := src.C
			b := c.B()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			claim := "local p = redis.call('ZPOPMIN', KEYS[1]) if #p > 0 then redis.call('ZADD', KEYS[1], 1e9, p[1]) end return 1"
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var cmd valkey.Completed
				m := fmt.Sprintf("J%07d", rng.IntN(size))
				switch i % 12 {
				case 0:
					cmd = b.Zpopmin().Key(p + "pending").Count(int64(1 + rng.IntN(3))).Build()
				case 1:
					cmd = b.Zpopmax().Key(p + "pending").Build()
				case 2:
					cmd = b.Zadd().Key(p+"pending").ScoreMember().ScoreMember(float64(rng.IntN(100)), fmt.Sprintf("N%d-%d", w, i)).Build()
				case 3:
					cmd = b.Zrem().Key(p + "pending").Member(m).Build()
				case 4:
					cmd = b.Zadd().Key(p+"pending").Xx().ScoreMember().ScoreMember(float64(rng.IntN(1000))-500, m).Build()
				case 5:
					cmd = b.Zincrby().Key(p + "pending").Increment(1.5).Member(m).Build()
				case 6:
					cmd = b.Eval().Script(claim).Numkeys(1).Key(p + "pending").Build()
				case 7:
					cmd = b.Hset().Key(p+"h").FieldValue().FieldValue(fmt.Sprintf("f%d", rng.IntN(size+100)), fmt.Sprint(i)).Build()
				case 8:
					cmd = b.Hincrby().Key(p + "h").Field(fmt.Sprintf("n%d", rng.IntN(50))).Increment(1).Build()
				case 9:
					cmd = b.Hdel().Key(p + "h").Field(fmt.Sprintf("f%d", rng.IntN(size))).Build()
				case 10:
					cmd = b.Spop().Key(p + "s").Build()
				case 11:
					cmd = b.Sadd().Key(p + "s").Member(fmt.Sprintf("s%d-%d", w, i)).Build()
				}
				if err := c.Do(ctx, cmd).Error(); err != nil && !valkey.IsValkeyNil(err) {
					t.Errorf("writer: %v", err)
					return
				}
				wmu.Lock()
				writes++
				wmu.Unlock()
			}
		}()
	}
	stopped := false
	stopWriters := func() {
		if !stopped {
			close(stop)
			wg.Wait()
			stopped = true
		}
	}
	defer stopWriters()

	// The first copy, in chunks, while written.
	if _, full := tr.TakeChanges(); !full {
		t.Fatal("a new tracker does not ask for every key")
	}
	large := []string{p + "pending", p + "h", p + "s"}
	for _, k := range large {
		res, err := cp.SyncLarge(ctx, k, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Copied || !cp.Based(k) {
			t.Fatalf("%s: copied %v, a base %v", k, res.Copied, cp.Based(k))
		}
	}
	// Rounds of patches while written, each verified by a scan.
	deadline := time.Now().Add(30 * time.Second)
	for round := 0; round < 5 || !waitedFor(&wmu, &writes, 3000); round++ {
		if time.Now().After(deadline) {
			t.Fatal("the writers made too few writes")
		}
		if err := tr.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		chs, full := tr.TakeChanges()
		if full {
			t.Fatal("the tracking restarted")
		}
		for _, k := range large {
			ch, ok := chs[k]
			if !ok {
				continue
			}
			if !cp.Patchable(k, ch) {
				t.Fatalf("%s: change not patchable: whole %v", k, ch.Whole)
			}
			if _, err := cp.Patch(ctx, k, ch, false); err != nil {
				t.Fatal(err)
			}
			if err := cp.ScanVerify(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	stopWriters()
	if err := tr.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	chs, _ := tr.TakeChanges()
	before := cp.St.Patched
	work := 0
	for _, k := range large {
		if ch, ok := chs[k]; ok {
			work += len(ch.Members) + int(ch.Head+ch.Tail)
			if _, err := cp.Patch(ctx, k, ch, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	equalKeys(t, cp, large)
	if bad, err := cp.SameSize(ctx, large); err != nil || len(bad) > 0 {
		t.Errorf("sizes differ: %v %v", bad, err)
	}
	t.Logf("%d writes; the last patch wrote %d elements for a change of %d named or popped", writes, cp.St.Patched-before, work)
	if cp.St.Patched-before > int64(2*work+10) {
		t.Errorf("the last patch wrote %d elements for a change of %d", cp.St.Patched-before, work)
	}
	_ = keys
}

// waitedFor reports whether n reached want.
func waitedFor(mu *sync.Mutex, n *int64, want int64) bool {
	mu.Lock()
	defer mu.Unlock()
	return *n >= want
}
