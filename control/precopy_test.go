package control

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
// queue throughout, so the hold has work, and --max-hold is shorter than
// any: the hold is released (the queue owned by its source again) and the
// keys it took are copied again while served. The writer stops at the
// first release; the next hold completes the move, and the target equals
// the source. Then a move stopped while copying is aborted and the
// notification setting comes back.
func TestHoldReleasedAtMaxHold(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testHoldReleased)
}

func testHoldReleased(t *testing.T, srv node.Server) {
	src, dst := pair(t, srv)
	ctx := context.Background()
	keys := fillLarge(t, src, "q", 3000)
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
	out := &lineWriter{onLine: func(l string) {
		if strings.HasPrefix(l, "released q") {
			once.Do(func() { close(stop) })
		}
	}}
	nodes := map[string]*Node{"src": src, "dst": dst}
	rep, err := (&Mover{Queue: "q", To: "dst", Nodes: nodes, FileRoute: func(string) string { return "src" },
		LargeKey: 4 << 10, Chunk: 200, MaxHold: time.Nanosecond, Wait: time.Second, Out: out}).Run(ctx)
	wg.Wait()
	t.Logf("mover:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "released q: the copy under the hold passed --max-hold") || rep.Released < 1 {
		t.Errorf("no hold was released for --max-hold (%d released)", rep.Released)
	}
	srcKeys, _ := scanQueue(ctx, src, "q", 0)
	dstKeys, _ := scanQueue(ctx, dst, "q", 0)
	if len(srcKeys) != len(dstKeys) || rep.Keys != len(srcKeys) {
		t.Errorf("source %d keys, target %d, report %d", len(srcKeys), len(dstKeys), rep.Keys)
	}
	cp := newCopier(src, dst, "q", 0, 4<<10, 200, nil)
	equalKeys(t, cp, append(keys, srcKeys...))
	if v, _ := getNotify(ctx, src.C); v != "" {
		t.Errorf("notify-keyspace-events after the move: %q", v)
	}

	// A stopped move is aborted: the setting comes back.
	out = &lineWriter{}
	if _, err := (&Mover{Queue: "q", To: "src", Nodes: nodes, FileRoute: func(string) string { return "src" },
		Replace: true, MaxHold: time.Nanosecond, Wait: time.Second, StopAfter: StepCopying, Track: TrackKeyspace, Out: out}).Run(ctx); err != ErrStopped {
		t.Fatalf("stop after copying: %v", err)
	}
	if v, _ := getNotify(ctx, dst.C); !notifyCovers(v) {
		t.Errorf("the stopped mover's source has notifications %q", v)
	}
	if err := (&Mover{Queue: "q", Nodes: nodes, FileRoute: func(string) string { return "src" }, Out: out}).Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := getNotify(ctx, dst.C); v != "" {
		t.Errorf("notify-keyspace-events after --abort: %q", v)
	}
}

// TestRateBelowTheWriteRateIsSaid: when the queue's keys change about as
// fast as --rate copies them, the mover says so (the rounds cannot
// shrink) and names the way out.
func TestRateBelowTheWriteRateIsSaid(t *testing.T) {
	node.Long(t)
	srv := node.Redis()
	src, dst := pair(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := src.C.B()
	for i := range 600 {
		must(t, src.C, b.Hset().Key(fmt.Sprintf("emq:{q}:job:J%05d", i)).FieldValue().FieldValue("state", "pending").Build())
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // rewrites every row, over and over
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			_ = src.C.Do(ctx, b.Hset().Key(fmt.Sprintf("emq:{q}:job:J%05d", i%600)).FieldValue().FieldValue("attempts", fmt.Sprint(i)).Build()).Error()
		}
	}()
	said := make(chan struct{})
	var once sync.Once
	out := &lineWriter{onLine: func(l string) {
		if strings.Contains(l, "change about as fast as --rate") && strings.Contains(l, "a higher --rate") {
			once.Do(func() { close(said) })
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := (&Mover{Queue: "q", To: "dst", Nodes: map[string]*Node{"src": src, "dst": dst}, FileRoute: func(string) string { return "src" },
			Rate: 8 << 10, TailKeys: 100, Wait: time.Second, Out: out}).Run(ctx)
		done <- err
	}()
	select {
	case <-said:
	case err := <-done:
		t.Fatalf("the move ended (%v) without saying the rate is too low:\n%s", err, out)
	case <-time.After(2 * time.Minute):
		t.Fatalf("the mover never said the rate is too low:\n%s", out)
	}
	cancel()
	<-done
	wg.Wait()
}
