package control

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/internal/controltest"
	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/node"
)

// lineWriter collects a mover's lines for the test log.
type lineWriter struct {
	mu     sync.Mutex
	b      strings.Builder
	onLine func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.onLine != nil {
		w.onLine(string(p))
	}
	return w.b.Write(p)
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestHoldReleasedAtMaxHold: a writer that bypasses any proxy changes the
// queue throughout, so the hold has work; the mover holds once the tail
// fits within --max-hold at the rate it measured, and the writer then
// writes a burst (before the tail is copied) that no hold of --max-hold
// can copy: the hold is released (the queue owned by its source again)
// and the keys it took are copied again while served. The writer stops at
// the first release; the next hold completes the move, and the target
// equals the source. Then a move stopped while copying is aborted and the
// notification setting comes back.
func TestHoldReleasedAtMaxHold(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testHoldReleased)
}

func testHoldReleased(t *testing.T, srv node.Server) {
	src, dst := controltest.Pair(t, srv)
	ctx := context.Background()
	keys := controltest.FillLarge(t, src, "q", 3000)
	stop := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		c := src.C
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("W%06d", i)
			_ = c.Do(ctx, c.B().Zadd().Key("emq:{q}:pending").ScoreMember().ScoreMember(float64(i), id).Build()).Error()
			_ = c.Do(ctx, c.B().Hset().Key("emq:{q}:job:"+id).FieldValue().FieldValue("state", "pending").Build()).Error()
			time.Sleep(200 * time.Microsecond) // a steady writer, not a busy loop
		}
	}()
	defer once.Do(func() { close(stop) })
	var burst sync.Once
	out := &lineWriter{onLine: func(l string) {
		if strings.HasPrefix(l, "held q") {
			// Written before the mover copies the tail (it waits for
			// this line): 100k rows, far more than 200ms of copy.
			burst.Do(func() {
				b := src.C.B()
				for lo := 0; lo < 100_000; lo += 1000 {
					var cmds valkey.Commands
					for i := lo; i < lo+1000; i++ {
						cmds = append(cmds, b.Hset().Key(fmt.Sprintf("emq:{q}:job:X%06d", i)).FieldValue().FieldValue("state", "pending").Build())
					}
					controltest.Must(t, src.C, cmds...)
				}
			})
		}
		if strings.HasPrefix(l, "released q") {
			once.Do(func() { close(stop) })
		}
	}}
	nodes := map[string]*table.Node{"src": src, "dst": dst}
	rep, err := (&Mover{Queue: "q", To: "dst", Nodes: nodes, FileRoute: func(string) string { return "src" },
		LargeKey: 4 << 10, Chunk: 200, MaxHold: 200 * time.Millisecond, Wait: time.Second, Out: out}).Run(ctx)
	once.Do(func() { close(stop) })
	wg.Wait()
	t.Logf("mover:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "released q: the copy under the hold passed --max-hold") || rep.Released < 1 {
		t.Errorf("no hold was released for --max-hold (%d released)", rep.Released)
	}
	srcKeys, _ := keycopy.ScanQueue(ctx, src, "q", 0)
	dstKeys, _ := keycopy.ScanQueue(ctx, dst, "q", 0)
	if len(srcKeys) != len(dstKeys) || rep.Keys != len(srcKeys) {
		t.Errorf("source %d keys, target %d, report %d", len(srcKeys), len(dstKeys), rep.Keys)
	}
	equalKeys(t, src, dst, append(keys, srcKeys...))
	if v, _ := tail.GetNotify(ctx, src.C); v != "" {
		t.Errorf("notify-keyspace-events after the move: %q", v)
	}

	// A stopped move is aborted: the setting comes back.
	out = &lineWriter{}
	if _, err := (&Mover{Queue: "q", To: "src", Nodes: nodes, FileRoute: func(string) string { return "src" },
		Replace: true, MaxHold: time.Nanosecond, Wait: time.Second, StopAfter: StepCopying, Track: tail.TrackKeyspace, Out: out}).Run(ctx); err != ErrStopped {
		t.Fatalf("stop after copying: %v", err)
	}
	if v, _ := tail.GetNotify(ctx, dst.C); !tail.NotifyCovers(v) {
		t.Errorf("the stopped mover's source has notifications %q", v)
	}
	if err := (&Mover{Queue: "q", Nodes: nodes, FileRoute: func(string) string { return "src" }, Out: out}).Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := tail.GetNotify(ctx, dst.C); v != "" {
		t.Errorf("notify-keyspace-events after --abort: %q", v)
	}
}

// TestChangedRoundsAreNotPaced: --rate paces the round that reads every
// key, not the rounds of the keys that changed since (their reads follow
// the clients' writes). At 8 KiB/s the first round of 600 rows takes
// seconds while a writer rewrites them all the time; the next rounds copy
// what changed unpaced, faster than the pace, and the mover plans its
// hold from the rate it measured and says so.
func TestChangedRoundsAreNotPaced(t *testing.T) {
	node.Long(t)
	srv := node.Redis()
	src, dst := controltest.Pair(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := src.C.B()
	for i := range 600 {
		controltest.Must(t, src.C, b.Hset().Key(fmt.Sprintf("emq:{q}:job:J%05d", i)).FieldValue().FieldValue("state", "pending").Build())
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // rewrites every row, over and over
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			_ = src.C.Do(ctx, b.Hset().Key(fmt.Sprintf("emq:{q}:job:J%05d", i%600)).FieldValue().FieldValue("attempts", fmt.Sprint(i)).Build()).Error()
		}
	}()
	const rate = 8 << 10
	said := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var unpaced []string
	out := &lineWriter{onLine: func(l string) {
		if strings.Contains(l, "(unpaced)") {
			mu.Lock()
			unpaced = append(unpaced, l)
			mu.Unlock()
		}
		if strings.HasPrefix(l, "holding: ") && strings.Contains(l, "keys/s") {
			once.Do(func() { close(said) })
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := (&Mover{Queue: "q", To: "dst", Nodes: map[string]*table.Node{"src": src, "dst": dst}, FileRoute: func(string) string { return "src" },
			Rate: rate, TailKeys: 100, Wait: time.Second, Out: out}).Run(ctx)
		done <- err
	}()
	select {
	case <-said:
	case err := <-done:
		t.Fatalf("the move ended (%v) without planning a hold at the measured rate:\n%s", err, out)
	case <-time.After(2 * time.Minute):
		t.Fatalf("the mover never planned a hold at the measured rate:\n%s", out)
	}
	cancel()
	<-done
	wg.Wait()
	t.Logf("mover:\n%s", out)
	if !strings.Contains(out.String(), "round 1 (every key at --rate 8.0 KiB/s)") {
		t.Errorf("the first round was not said to be paced")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(unpaced) == 0 {
		t.Fatalf("no round of changed keys")
	}
	// A round of changed rows at the pace would copy about 8 KiB/s /
	// 40 B = 200 rows a second; unpaced, the rounds copy many more.
	fast := false
	re := regexp.MustCompile(`, (\d+) keys/s;`)
	for _, l := range unpaced {
		if m := re.FindStringSubmatch(l); m != nil {
			if kps, _ := strconv.Atoi(m[1]); kps > 2000 {
				fast = true
			}
		}
	}
	if !fast {
		t.Errorf("no round of changed keys copied faster than the pace:\n%s", strings.Join(unpaced, ""))
	}
}

// equalKeys fails the test unless every key has the same content on both
// nodes.
func equalKeys(t *testing.T, src, dst *table.Node, keys []string) {
	t.Helper()
	controltest.EqualKeys(t, keycopy.Content, src, dst, keys)
}

// TestGrowingQueueConvergesAtALowRate: a writer enqueues (a row and its
// member of the pending set) about five times faster than --rate copies.
// The round at --rate reads only what was there when it began: the rows
// enqueued meanwhile are left to the unpaced rounds, and the pending set,
// large and copied first, is patched while the rows are copied, so its
// change never grows into one read whole again at --rate. The rounds
// converge and the mover holds; the writer stops there (it bypasses the
// proxies, which the hold would stop), and the move completes with the
// target equal to the source.
func TestGrowingQueueConvergesAtALowRate(t *testing.T) {
	node.Long(t)
	srv := node.Redis()
	src, dst := controltest.Pair(t, srv)
	ctx := context.Background()
	b := src.C.B()
	const rows = 1000
	payload := strings.Repeat("p", 40)
	for lo := 0; lo < rows; lo += 100 {
		var cmds valkey.Commands
		for i := lo; i < lo+100; i++ {
			id := fmt.Sprintf("J%06d", i)
			cmds = append(cmds, b.Hset().Key("emq:{q}:job:"+id).FieldValue().FieldValue("state", "pending").FieldValue("payload", payload).Build(),
				b.Zadd().Key("emq:{q}:pending").ScoreMember().ScoreMember(0, id).Build())
		}
		controltest.Must(t, src.C, cmds...)
	}
	start, stop := make(chan struct{}), make(chan struct{})
	var started, once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // about 1,000 enqueues a second, 5 times what 16 KiB/s reads
		defer wg.Done()
		select { // from when the tracking began, just before round 1
		case <-start:
		case <-stop:
			return
		}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			id := fmt.Sprintf("W%06d", i)
			_ = src.C.Do(ctx, b.Hset().Key("emq:{q}:job:"+id).FieldValue().FieldValue("state", "pending").FieldValue("payload", payload).Build()).Error()
			_ = src.C.Do(ctx, b.Zadd().Key("emq:{q}:pending").ScoreMember().ScoreMember(float64(i), id).Build()).Error()
		}
	}()
	defer once.Do(func() { close(stop) })
	out := &lineWriter{onLine: func(l string) {
		if strings.HasPrefix(l, "tracking changes of q") {
			started.Do(func() { close(start) })
		}
		if strings.HasPrefix(l, "holding: ") {
			once.Do(func() { close(stop) })
		}
	}}
	mctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	rep, err := (&Mover{Queue: "q", To: "dst", Nodes: map[string]*table.Node{"src": src, "dst": dst}, FileRoute: func(string) string { return "src" },
		Rate: 16 << 10, LargeKey: 4 << 10, Chunk: 200, Wait: time.Second, Out: out}).Run(mctx)
	once.Do(func() { close(stop) })
	wg.Wait()
	t.Logf("mover:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	// Round 1 reads the rows there when it began (with the few enqueued
	// between the tracking's start and the round's), not the thousands
	// enqueued during it.
	m := regexp.MustCompile(`round 1 \(every key at --rate [^)]*\): (\d+) keys`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no paced first round in the mover's output")
	}
	if n, _ := strconv.Atoi(m[1]); n > rows+rows/4 {
		t.Errorf("round 1 copied %d keys at --rate: the rows enqueued during it were read at the pace too (%d were there)", n, rows)
	}
	srcKeys, _ := keycopy.ScanQueue(ctx, src, "q", 0)
	dstKeys, _ := keycopy.ScanQueue(ctx, dst, "q", 0)
	if len(srcKeys) != len(dstKeys) || rep.Keys != len(srcKeys) {
		t.Errorf("source %d keys, target %d, report %d", len(srcKeys), len(dstKeys), rep.Keys)
	}
	equalKeys(t, src, dst, srcKeys)
}

// TestTTLSetDuringTheBulkCopyComesAlong: a TTL set during the bulk round,
// on a row already copied and on one not yet read, reaches the target:
// the tracker records the write, and the row is copied again with its TTL.
func TestTTLSetDuringTheBulkCopyComesAlong(t *testing.T) {
	node.Long(t)
	src, dst := controltest.Pair(t, node.Redis())
	ctx := context.Background()
	b := src.C.B()
	const rows = 600
	var cmds valkey.Commands
	for i := range rows {
		cmds = append(cmds, b.Hset().Key(fmt.Sprintf("emq:{q}:job:J%06d", i)).FieldValue().FieldValue("state", "pending").
			FieldValue("payload", strings.Repeat("p", 40)).Build())
	}
	controltest.Must(t, src.C, cmds...)
	var expired []string
	for i := 0; i < rows; i += 7 {
		expired = append(expired, fmt.Sprintf("emq:{q}:job:J%06d", i))
	}
	done := make(chan struct{})
	out := &lineWriter{onLine: func(l string) {
		if strings.HasPrefix(l, "progress: copying, round 1:") {
			select {
			case <-done:
			default: // at the first progress line: part of the rows copied
				close(done)
				var cmds valkey.Commands
				for _, k := range expired {
					cmds = append(cmds, b.Pexpire().Key(k).Milliseconds(600_000).Build())
				}
				controltest.Must(t, src.C, cmds...)
			}
		}
	}}
	mctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	_, err := (&Mover{Queue: "q", To: "dst", Nodes: map[string]*table.Node{"src": src, "dst": dst}, FileRoute: func(string) string { return "src" },
		Rate: 8 << 10, ProgressEvery: 500 * time.Millisecond, Wait: time.Second, Out: out}).Run(mctx)
	t.Logf("mover:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	default:
		t.Fatal("the round ended before its first progress line: no TTL was set during it")
	}
	for _, k := range expired {
		if ttl, err := dst.C.Do(ctx, dst.C.B().Pttl().Key(k).Build()).AsInt64(); err != nil || ttl < 500_000 {
			t.Errorf("%s on the target: PTTL %d (%v), want the TTL set on the source during the copy", k, ttl, err)
		}
	}
}

// TestAbortOfAReplaceMoveDeletesItsCopy: a --replace move may begin on a
// target that has keys of the queue. Its first round deletes them for the
// copy; from then on every key of the queue there is the move's, and an
// abort (or a failed copy) deletes them all. It used to keep them all,
// as if they were still the target's own: the fault campaign found such
// copies left behind (moves with --replace whose copies failed: 383,686
// keys of 4 queues). Each step a mover can be stopped at comes after the
// copy began.
func TestAbortOfAReplaceMoveDeletesItsCopy(t *testing.T) {
	src, dst := controltest.Pair(t, node.Redis())
	nodes := map[string]*table.Node{"src": src, "dst": dst}
	route := func(string) string { return "src" }
	ctx := context.Background()
	for i := range 50 {
		controltest.Must(t, src.C, src.C.B().Hset().Key(fmt.Sprintf("emq:{q}:job:J%03d", i)).FieldValue().FieldValue("state", "pending").Build())
	}
	for _, stop := range []string{StepCopying, StepHeld} {
		controltest.Must(t, dst.C, dst.C.B().Hset().Key("emq:{q}:job:OLD").FieldValue().FieldValue("state", "done").Build())
		out := &lineWriter{}
		if _, err := (&Mover{Queue: "q", To: "dst", Nodes: nodes, FileRoute: route, Replace: true, Wait: time.Second,
			StopAfter: stop, Out: out}).Run(ctx); err != ErrStopped {
			t.Fatalf("stop after %s: %v\n%s", stop, err, out)
		}
		if err := (&Mover{Queue: "q", Nodes: nodes, FileRoute: route, Out: out}).Abort(ctx); err != nil {
			t.Fatalf("abort after %s: %v\n%s", stop, err, out)
		}
		if keys, err := keycopy.ScanQueue(ctx, dst, "q", 0); err != nil || len(keys) > 0 {
			t.Errorf("after the abort of a --replace move stopped after %s the target has %d keys of q (%v)\n%s", stop, len(keys), err, out)
		}
	}
}

// TestWaitEndIsBoundByTheDeadline: a wait before a hold lasts ReplicaWait,
// and ends at the command's --deadline (Until) when that comes first.
func TestWaitEndIsBoundByTheDeadline(t *testing.T) {
	m := &Mover{ReplicaWait: 30 * time.Second}
	if d := time.Until(m.waitEnd()); d < 29*time.Second || d > 30*time.Second {
		t.Errorf("without a deadline the wait lasts %v, want ReplicaWait (30s)", d)
	}
	m.Until = time.Now().Add(2 * time.Second)
	if end := m.waitEnd(); !end.Equal(m.Until) {
		t.Errorf("with the deadline 2s away the wait ends %v after it, want at it", end.Sub(m.Until))
	}
	m.Until = time.Now().Add(time.Minute)
	if d := time.Until(m.waitEnd()); d > 30*time.Second {
		t.Errorf("with the deadline a minute away the wait lasts %v, want ReplicaWait (30s)", d)
	}
}
