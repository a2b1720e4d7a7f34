package tail

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/internal/controltest"
	"github.com/emqproxy/emqproxy/control/table"

	"github.com/emqproxy/emqproxy/stand/node"
)

// waitLost polls until the tracker has noticed that its subscription is
// gone.
func waitLost(t *testing.T, tr *Tracker) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.mu.Lock()
		lost := tr.lost
		tr.mu.Unlock()
		if lost != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the tracker did not notice its subscription was killed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTrackerSeesChangesAndRestarts: the tracker records exactly the keys
// of its queue that change (from any client: a script's writes too); a
// killed subscription (CLIENT KILL TYPE pubsub), a flush and a changed
// notification setting are each noticed, and after a restart every key
// counts as changed. The node's setting is restored when the last tracker
// stops.
func TestTrackerSeesChangesAndRestarts(t *testing.T) { node.EachServer(t, testTracker) }

func testTracker(t *testing.T, srv node.Server) {
	src, _ := controltest.Pair(t, srv)
	ctx := context.Background()
	c := src.C
	controltest.Must(t, c, c.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "Ex").Build())
	tr, err := StartTracker(ctx, src, "a", TrackKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	other, err := StartTracker(ctx, src, "b", TrackKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := GetNotify(ctx, c); !NotifyCovers(v) {
		t.Fatalf("notify-keyspace-events while tracking: %q", v)
	}
	if _, full := tr.take(); !full {
		t.Error("a new tracker does not ask for a full copy")
	}
	controltest.Must(t, c, c.B().Hset().Key("emq:{a}:job:1").FieldValue().FieldValue("state", "pending").Build(),
		c.B().Zadd().Key("emq:{a}:pending").ScoreMember().ScoreMember(0, "1").Build(),
		c.B().Set().Key("emq:{ab}:x").Value("1").Build(),
		c.B().Set().Key("emq:{b}:x").Value("1").Build(),
		c.B().Eval().Script("redis.call('DEL', KEYS[1]) return 1").Numkeys(1).Key("emq:{a}:gone").Build(),
		c.B().Eval().Script("redis.call('ZREM', KEYS[1], '1') return 1").Numkeys(1).Key("emq:{a}:pending").Build())
	if err := tr.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	keys, full := tr.take()
	slices.Sort(keys)
	if full || !slices.Equal(keys, []string{"emq:{a}:job:1", "emq:{a}:pending"}) {
		t.Errorf("changed keys %v (full %v)", keys, full)
	}

	// A killed subscription.
	controltest.Must(t, c, c.B().ClientKill().TypePubsub().Build())
	waitLost(t, tr)
	if err := tr.Settle(ctx); !errors.Is(err, ErrTracking) {
		t.Fatalf("settle after the kill: %v", err)
	}
	if err := tr.Restart(ctx, err); err != nil {
		t.Fatal(err)
	}
	if _, full := tr.take(); !full {
		t.Error("a restarted tracker does not ask for a full copy")
	}
	controltest.Must(t, c, c.B().Set().Key("emq:{a}:paused").Value("1").Build())
	if err := tr.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if keys, _ := tr.take(); !slices.Equal(keys, []string{"emq:{a}:paused"}) {
		t.Errorf("after the restart: %v", keys)
	}

	// A setting changed under the tracker.
	controltest.Must(t, c, c.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "").Build())
	if err := tr.Settle(ctx); !errors.Is(err, ErrTracking) {
		t.Errorf("settle with notifications turned off: %v", err)
	}
	if err := tr.Restart(ctx, err); err != nil {
		t.Fatal(err)
	}
	if err := tr.Settle(ctx); err != nil {
		t.Errorf("settle after the restart turned them on again: %v", err)
	}

	// The previous setting comes back with the last tracker.
	if err := tr.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := GetNotify(ctx, c); !NotifyCovers(v) {
		t.Errorf("stopping one tracker turned notifications off under another: %q", v)
	}
	if err := other.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := GetNotify(ctx, c); v != "xE" && v != "Ex" {
		t.Errorf("notify-keyspace-events after the trackers: %q, want the operator's Ex", v)
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key(KeyNotify).Build()).AsInt64(); n != 0 {
		t.Errorf("%s left behind", KeyNotify)
	}

	// A flush sends no event: the fingerprint sees it.
	tr, err = StartTracker(ctx, src, "a", TrackKeyspace)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Stop(ctx) }()
	controltest.Must(t, c, c.B().Flushdb().Build())
	if err := tr.Settle(ctx); !errors.Is(err, ErrTracking) {
		t.Errorf("settle after FLUSHDB: %v", err)
	}
}

// TestTrackAutoFallsBack: where the source refuses its replication stream
// (here an ACL user without PSYNC), --track auto tracks keyspace
// notifications instead and says why, and --track replication fails with
// the reason.
func TestTrackAutoFallsBack(t *testing.T) { node.EachServer(t, testTrackFallback) }

func testTrackFallback(t *testing.T, srv node.Server) {
	src, _ := controltest.Pair(t, srv)
	ctx := context.Background()
	controltest.Must(t, src.C, src.C.B().AclSetuser().Username("mover").Rule("on", ">secret", "~*", "&*", "+@all", "-psync", "-sync").Build())
	o := src.Opts
	o.Username, o.Password = "mover", "secret"
	n, err := table.Dial(o)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := StartTracker(ctx, n, "a", TrackReplication); err == nil || !strings.Contains(err.Error(), "PSYNC") {
		t.Errorf("--track replication without PSYNC: %v", err)
	}
	tr, err := StartTracker(ctx, n, "a", TrackAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Stop(ctx) }()
	if tr.MemberLevel() || !strings.Contains(tr.Source(), "keyspace notifications (not the replication stream: ") {
		t.Errorf("auto without PSYNC tracks %q", tr.Source())
	}
	tr.TakeChanges()
	controltest.Must(t, src.C, src.C.B().Zadd().Key("emq:{a}:pending").ScoreMember().ScoreMember(0, "1").Build())
	if err := tr.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if ch, ok := tr.ChangeOf("emq:{a}:pending"); !ok || !ch.Whole {
		t.Errorf("a notification's change: %+v %v, want whole", ch, ok)
	}
}

// TestTrackJoinSparesTheSyncDelay: a node without a replication backlog
// answers the reader's full synchronisation only after its
// repl-diskless-sync-delay (5 s by default). The tracker sets it to 0 for
// the join, says so, and puts the node's value back.
func TestTrackJoinSparesTheSyncDelay(t *testing.T) { node.EachServer(t, testTrackJoinDelay) }

func testTrackJoinDelay(t *testing.T, srv node.Server) {
	nd := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
	n, err := table.Dial(table.NodeOptions{Name: "src", Address: nd.Addr, Password: nd.Opts.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	controltest.Must(t, n.C, n.C.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync", "yes").
		ParameterValue("repl-diskless-sync-delay", "7").Build())
	t0 := time.Now()
	tr, err := StartTracker(ctx, n, "a", TrackReplication)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Stop(ctx) }()
	t.Logf("joined in %v: %s", time.Since(t0), tr.Source())
	if !strings.Contains(tr.Source(), "repl-diskless-sync-delay (7 s) was set to 0 for the join and put back") {
		t.Errorf("the join says %q, want the delay set to 0 and put back", tr.Source())
	}
	if v, err := n.C.Do(ctx, n.C.B().ConfigGet().Parameter("repl-diskless-sync-delay").Build()).AsStrMap(); err != nil || v["repl-diskless-sync-delay"] != "7" {
		t.Errorf("after the join the node's repl-diskless-sync-delay is %v (%v), want its 7 back", v, err)
	}
	if n, err := n.C.Do(ctx, n.C.B().Exists().Key(KeySyncDelay).Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("after the join %s exists: %d %v", KeySyncDelay, n, err)
	}
	// A second tracker joins from the backlog the first one's join made:
	// nothing to spare, nothing changed.
	tr2, err := StartTracker(ctx, n, "b", TrackReplication)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr2.Stop(ctx) }()
	if s := tr2.Source(); !strings.Contains(s, "joined from its replication backlog") || strings.Contains(s, "repl-diskless-sync-delay") {
		t.Errorf("the second join says %q, want it from the backlog, the delay left alone", s)
	}
}

// TestKilledJoinsDelayIsPutBack: a mover killed between setting the
// node's repl-diskless-sync-delay to 0 and putting it back leaves its save
// on the node. While the mover's connection is there, the save is a join
// under way and is left alone; once it is gone, RestoreSyncDelay (which
// --abort calls) puts the value back, and so does the next join.
func TestKilledJoinsDelayIsPutBack(t *testing.T) { node.EachServer(t, testKilledJoinDelay) }

func testKilledJoinDelay(t *testing.T, srv node.Server) {
	nd := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
	dial := func() *table.Node {
		n, err := table.Dial(table.NodeOptions{Name: "src", Address: nd.Addr, Password: nd.Opts.Password})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := dial()
	defer n.Close()
	ctx := context.Background()
	controltest.Must(t, n.C, n.C.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync", "yes").
		ParameterValue("repl-diskless-sync-delay", "7").Build())
	delay := func() string {
		v, err := n.C.Do(ctx, n.C.B().ConfigGet().Parameter("repl-diskless-sync-delay").Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		return v["repl-diskless-sync-delay"]
	}
	saved := func() bool {
		e, err := n.C.Do(ctx, n.C.B().Exists().Key(KeySyncDelay).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return e == 1
	}
	// killedJoin sets the delay to 0 as a join does, never puts it back,
	// and returns the mover's death: its connection closed, and gone from
	// the node.
	killedJoin := func() (kill func()) {
		m := dial()
		_ = quickJoin(ctx, m)
		if d := delay(); d != "0" || !saved() {
			t.Fatalf("after the join's start: delay %s, saved %v; want 0 and saved", d, saved())
		}
		id, err := m.C.Do(ctx, m.C.B().ClientId().Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return func() {
			m.Close()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				list, err := n.C.Do(ctx, n.C.B().Arbitrary("CLIENT", "LIST", "ID", strconv.FormatInt(id, 10)).Build()).ToString()
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(list, "id=") {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the killed join's connection is still on the node: %s", list)
				}
			}
		}
	}

	kill := killedJoin()
	if restored, err := RestoreSyncDelay(ctx, n); err != nil || restored || delay() != "0" || !saved() {
		t.Errorf("with the join's connection there: restored %v (%v), delay %s; want it left alone", restored, err, delay())
	}
	kill()
	if restored, err := RestoreSyncDelay(ctx, n); err != nil || !restored || delay() != "7" || saved() {
		t.Errorf("the join killed: restored %v (%v), delay %s, saved %v; want 7 put back and no save", restored, err, delay(), saved())
	}

	// The next join puts a killed join's delay back before its own.
	killedJoin()()
	tr, err := StartTracker(ctx, n, "a", TrackReplication)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Stop(ctx) }()
	if !strings.Contains(tr.Source(), "repl-diskless-sync-delay (7 s) was set to 0 for the join and put back") || delay() != "7" || saved() {
		t.Errorf("the next join says %q; delay %s, saved %v; want 7 put back and no save", tr.Source(), delay(), saved())
	}
}
