package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/internal/controltest"
	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestStalledMoverIsFenced stalls a mover (Mover.Pause) after each of its
// steps and failpoints in turn, runs --abort or --resume meanwhile, then
// lets the stalled mover go on. The mover must stop, saying it was
// superseded, unless the command left the move to it (an abort refused
// once the flip began); whoever owns the queue at the end has every job,
// the ones written on the source after an abort included; no record is
// left; and the table's entries never went backwards.
func TestStalledMoverIsFenced(t *testing.T) {
	node.Long(t)
	srv := node.Redis()
	type outcome struct {
		actErr     string // "" : the command succeeds
		superseded bool   // the stalled mover stops superseded (else it completes)
		owner      string // who serves the queue at the end
	}
	flip := "began its flip"
	cases := []struct {
		point, action string
		want          outcome
	}{
		{StepCopying, "abort", outcome{"", true, "src"}},
		{StepCopying, "resume", outcome{"", true, "dst"}},
		{StepHeld, "abort", outcome{"", true, "src"}},
		{StepHeld, "resume", outcome{"", true, "dst"}},
		{StepCopied, "abort", outcome{"", true, "src"}},
		{StepCopied, "resume", outcome{"", true, "dst"}},
		{StepFlipping, "abort", outcome{flip, false, "dst"}},
		{StepFlipping, "resume", outcome{"", true, "dst"}},
		// Past the flip, the move can only be completed: a resume
		// completes it (the source's keys deleted, the record removed),
		// an abort is refused and leaves it to the mover.
		{FailTargetFlipped, "abort", outcome{flip, false, "dst"}},
		{FailTargetFlipped, "resume", outcome{"", true, "dst"}},
		{FailFlipped, "abort", outcome{flip, false, "dst"}},
		{FailFlipped, "resume", outcome{"", true, "dst"}},
		{FailDeleted, "abort", outcome{flip, false, "dst"}},
		{FailDeleted, "resume", outcome{"", true, "dst"}},
	}
	for _, tc := range cases {
		t.Run(tc.point+"/"+tc.action, func(t *testing.T) {
			stalledMover(t, srv, tc.point, tc.action, tc.want.actErr, tc.want.superseded, tc.want.owner)
		})
	}
}

func stalledMover(t *testing.T, srv node.Server, point, action, actErr string, superseded bool, owner string) {
	src, dst := controltest.Pair(t, srv)
	nodes := map[string]*table.Node{"src": src, "dst": dst}
	route := func(string) string { return "src" }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var jobs []string
	enqueue := func(n *table.Node, id string) {
		t.Helper()
		controltest.Must(t, n.C, n.C.B().Hset().Key("emq:{q}:job:"+id).FieldValue().FieldValue("state", "pending").Build(),
			n.C.B().Zadd().Key("emq:{q}:pending").ScoreMember().ScoreMember(float64(len(jobs)), id).Build())
		jobs = append(jobs, id)
	}
	for i := range 20 {
		enqueue(src, fmt.Sprintf("J%03d", i))
	}

	// The table's entries of q, watched on both nodes: they only move forward.
	var seenMu sync.Mutex
	seen := map[string]table.Entry{}
	var backwards []string
	look := func() {
		for name, n := range nodes {
			s, err := n.C.Do(context.Background(), n.C.B().Hget().Key(table.KeyQueues).Field("q").Build()).ToString()
			if err != nil {
				continue
			}
			e, err := table.ParseEntry(s)
			if err != nil {
				t.Errorf("entry on %s: %v", name, err)
				continue
			}
			seenMu.Lock()
			if prev, ok := seen[name]; ok && (e.Epoch < prev.Epoch || e.Epoch == prev.Epoch && e != prev) {
				backwards = append(backwards, fmt.Sprintf("%s: %s after %s", name, e, prev))
			}
			seen[name] = e
			seenMu.Unlock()
		}
	}
	stopLook := make(chan struct{})
	var lookWG sync.WaitGroup
	lookWG.Add(1)
	go func() {
		defer lookWG.Done()
		for {
			look()
			select {
			case <-stopLook:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	paused, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	out := &lineWriter{}
	stalled := &Mover{Queue: "q", To: "dst", Nodes: nodes, FileRoute: route, Wait: time.Second, DeleteSource: true, Out: out,
		Pause: func(step string) {
			if step != point {
				return
			}
			first := false
			once.Do(func() { first = true; close(paused) })
			if first {
				<-goOn
			}
		}}
	done := make(chan error, 1)
	go func() {
		_, err := stalled.Run(ctx)
		done <- err
	}()
	select {
	case <-paused:
	case err := <-done:
		t.Fatalf("the mover ended (%v) before %s:\n%s", err, point, out)
	}

	other := &lineWriter{}
	cmd := &Mover{Queue: "q", Nodes: nodes, FileRoute: route, Wait: time.Second, DeleteSource: true, Out: other}
	var err error
	if action == "abort" {
		err = cmd.Abort(ctx)
	} else {
		_, err = cmd.Resume(ctx)
	}
	t.Logf("%s while stalled after %s: %v\n%s", action, point, err, other)
	switch {
	case actErr == "" && err != nil:
		t.Fatalf("%s: %v", action, err)
	case actErr != "" && (err == nil || !strings.Contains(err.Error(), actErr)):
		t.Fatalf("%s: %v, want an error with %q", action, err, actErr)
	}
	if who, e, err := Owner(ctx, nodes, route, "q"); err != nil {
		t.Fatal(err)
	} else if who == "src" && (e == nil || e.State == table.Owned) {
		// Clients go on writing to the queue's owner (not while it is
		// held).
		for i := range 5 {
			enqueue(src, fmt.Sprintf("AFTER%d", i))
		}
	}

	close(goOn)
	err = <-done
	close(stopLook)
	lookWG.Wait()
	look()
	t.Logf("the stalled mover went on: %v\n%s", err, out)
	if superseded {
		if !errors.Is(err, ErrSuperseded) || !strings.Contains(err.Error(), "superseded") {
			t.Errorf("the stalled mover: %v, want it superseded", err)
		}
	} else if err != nil {
		t.Errorf("the stalled mover: %v, want it to complete the move", err)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "flipped") && (owner == "src" || superseded && point != FailTargetFlipped && point != FailFlipped && point != FailDeleted) {
			t.Errorf("the superseded mover flipped: %q", l)
		}
	}

	who, e, err := Owner(ctx, nodes, route, "q")
	if err != nil {
		t.Fatal(err)
	}
	if who != owner || e != nil && e.State != table.Owned {
		t.Fatalf("the queue is %v %s at the end, want owned by %s", e, who, owner)
	}
	live := nodes[who]
	for _, id := range jobs {
		if n, err := live.C.Do(ctx, live.C.B().Exists().Key("emq:{q}:job:"+id).Build()).AsInt64(); err != nil || n != 1 {
			t.Errorf("job %s is not on the owner %s (%v)", id, who, err)
		}
		if _, err := live.C.Do(ctx, live.C.B().Zscore().Key("emq:{q}:pending").Member(id).Build()).AsFloat64(); err != nil {
			t.Errorf("job %s is not pending on the owner %s: %v", id, who, err)
		}
	}
	for name, n := range nodes {
		if k, _ := n.C.Do(ctx, n.C.B().Exists().Key(table.MoveKey("q")).Build()).AsInt64(); k != 0 {
			t.Errorf("a move record is left on %s", name)
		}
	}
	// Nothing is left behind: both movers asked for --delete-source, and
	// an abort deletes the target's copy.
	for name, n := range nodes {
		if name == who {
			continue
		}
		if keys, err := keycopy.ScanQueue(ctx, n, "q", 0); err != nil || len(keys) > 0 {
			t.Errorf("%d keys of q are left on %s, which does not own it (%v): %v", len(keys), name, err, keys)
		}
	}
	if len(backwards) > 0 {
		t.Errorf("entries went backwards: %v", backwards)
	}
}

// TestTwoHoldCopyMoversAtOnce starts two --hold-copy movers of one queue
// together, both stalled (Mover.Pause) before their hold: they read the
// same tables, so they chose one epoch. One holds, the other is refused:
// the hold creates the record only where there is none.
func TestTwoHoldCopyMoversAtOnce(t *testing.T) {
	src, dst := controltest.Pair(t, node.Redis())
	nodes := map[string]*table.Node{"src": src, "dst": dst}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	controltest.Must(t, src.C, src.C.B().Hset().Key("emq:{q}:job:J1").FieldValue().FieldValue("state", "pending").Build())
	// Both stall once validated, their epoch chosen, before either holds:
	// they read the same tables, so they chose one epoch.
	var wg, atBegin sync.WaitGroup
	atBegin.Add(2)
	errs := make([]error, 2)
	outs := []*lineWriter{{}, {}}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = (&Mover{Queue: "q", To: "dst", Nodes: nodes, FileRoute: func(string) string { return "src" },
				HoldCopy: true, Wait: time.Second, Out: outs[i], Pause: func(step string) {
					if step == FailBegin {
						atBegin.Done()
						atBegin.Wait()
					}
				}}).Run(ctx)
		}()
	}
	wg.Wait()
	for i := range 2 {
		t.Logf("mover %d: %v\n%s", i, errs[i], outs[i])
	}
	ok := 0
	for i := range 2 {
		switch {
		case errs[i] == nil:
			ok++
		case !strings.Contains(errs[i].Error(), "already moving"):
			t.Errorf("mover %d: %v, want it refused as already moving", i, errs[i])
		}
	}
	if ok != 1 {
		t.Fatalf("%d movers completed, want one", ok)
	}
	if held := strings.Count(outs[0].String()+outs[1].String(), "held q on src at epoch 1\n"); held != 1 {
		t.Errorf("%d holds at epoch 1, want one", held)
	}
}

// TestFencedWriteRefusesAnOlderEntry: a write fenced on the queue's entry
// is refused when the entry on the node is newer than the one written, or
// another one at its epoch (another mover wrote it), and raises the node's
// epoch only upwards. A record fence refuses another token or step.
func TestFencedWriteRefusesAnOlderEntry(t *testing.T) {
	n, _ := controltest.Pair(t, node.Redis())
	ctx := context.Background()
	m := &Mover{Queue: "q"}
	none := func() valkey.Commands { return nil }
	if err := m.fenced(ctx, n, nil, &table.Entry{Epoch: 5, State: table.Owned, Owner: "a"}, none); err != nil {
		t.Fatal(err)
	}
	for _, e := range []table.Entry{{Epoch: 5, State: table.Owned, Owner: "b"}, {Epoch: 4, State: table.Held, Owner: "a"}} {
		err := m.fenced(ctx, n, nil, &e, none)
		if !errors.Is(err, ErrSuperseded) {
			t.Errorf("writing %s over epoch 5: %v, want it refused", e, err)
		}
	}
	// The same entry again changes nothing and passes.
	if err := m.fenced(ctx, n, nil, &table.Entry{Epoch: 5, State: table.Owned, Owner: "a"}, none); err != nil {
		t.Errorf("the same entry again: %v", err)
	}
	// Another queue's move raised the node's epoch: an entry of q below it
	// is written, the epoch stays.
	controltest.Must(t, n.C, n.C.B().Set().Key(table.KeyEpoch).Value("9").Build())
	if err := m.fenced(ctx, n, nil, &table.Entry{Epoch: 7, State: table.Owned, Owner: "c"}, none); err != nil {
		t.Fatal(err)
	}
	tb, err := n.ReadTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Epoch != 9 || tb.Queues["q"] != (table.Entry{Epoch: 7, State: table.Owned, Owner: "c"}) {
		t.Errorf("table after the write: %+v", tb)
	}
	// A record fence: a token that is not the record's is refused, the
	// record's passes.
	controltest.Must(t, n.C, n.C.B().Hset().Key(table.MoveKey("q")).FieldValue().FieldValue("step", StepHeld).FieldValue(fieldToken, "t1").FieldValue(fieldBy, "resume (h pid 1)").Build())
	err = m.fenced(ctx, n, &fence{token: "t0", steps: []string{StepHeld}}, nil, none)
	if !errors.Is(err, ErrSuperseded) || !strings.Contains(err.Error(), "taken over by resume (h pid 1)") {
		t.Errorf("a stale token: %v", err)
	}
	if err := m.fenced(ctx, n, &fence{token: "t1", steps: []string{StepHeld}}, nil, none); err != nil {
		t.Errorf("the record's token: %v", err)
	}
	if err := m.fenced(ctx, n, &fence{token: "t1", steps: []string{StepCopied}}, nil, none); !errors.Is(err, ErrSuperseded) {
		t.Errorf("another step: %v", err)
	}
}

// TestNewEpochsAboveEveryAppliedEpoch: a node that lost its table (epoch 0
// there now) still has a proxy registered that applied epoch 9 from it.
// The proxies never go back to an older table of a node, so the mover's
// next epoch is above 9, not 1: the proxy applies it, and its stale
// registration cannot acknowledge a hold it never saw.
func TestNewEpochsAboveEveryAppliedEpoch(t *testing.T) {
	src, dst := controltest.Pair(t, node.Redis())
	nodes := map[string]*table.Node{"src": src, "dst": dst}
	ctx := context.Background()
	controltest.Must(t, src.C, src.C.B().Hset().Key("emq:{q}:job:J1").FieldValue().FieldValue("state", "pending").Build(),
		src.C.B().Hset().Key(table.KeyProxies).FieldValue().FieldValue("p1", `{"applied":9,"renewed":1,"lease_ms":1000}`).Build())
	out := &lineWriter{}
	_, err := (&Mover{Queue: "q", To: "dst", Nodes: nodes, FileRoute: func(string) string { return "src" },
		HoldCopy: true, Wait: time.Second, StopAfter: StepHeld, Out: out}).Run(ctx)
	if err != ErrStopped {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "held q on src at epoch 10\n") {
		t.Errorf("the hold's epoch is not above the applied epoch 9:\n%s", out)
	}
}
