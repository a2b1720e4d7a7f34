package tail

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/rewrite"
)

// ErrTracking is wrapped when the tracking of a queue's changes cannot be
// trusted for a while (its subscription was lost, the node's notification
// setting changed, the node restarted or was flushed): the mover restarts
// it and re-reads every key of the queue.
var ErrTracking = errors.New("change tracking lost")

// barrierWait bounds the wait for the tracker's own barrier message.
const barrierWait = 5 * time.Second

// Tracking modes (control.Mover.Track).
const (
	// TrackAuto reads the replication stream where the source allows it
	// (openReplStream says when it does not) and keyspace notifications
	// elsewhere.
	TrackAuto = "auto"
	// TrackReplication reads the source's replication stream, as a
	// replica does: it names every member a write changes.
	TrackReplication = "replication"
	// TrackKeyspace subscribes to the source's keyspace notifications:
	// they name the key a write changes, not the member.
	TrackKeyspace = "keyspace"
)

// ParseTrack checks a tracking mode ("" is TrackAuto).
func ParseTrack(s string) (string, error) {
	switch s {
	case "", TrackAuto:
		return TrackAuto, nil
	case TrackReplication, TrackKeyspace:
		return s, nil
	}
	return "", fmt.Errorf("%w: --track %q: want %s, %s or %s", table.ErrMove, s, TrackAuto, TrackReplication, TrackKeyspace)
}

// Tracker follows the changes of one queue's keys on its source node, on
// a connection of its own: the node's replication stream (every write the
// node executes, in order, member by member), or a pattern subscription to
// the keyspace channels of the queue's hashtag (the key of every write).
// Either way a barrier message the tracker publishes on a channel of its
// own comes back on that connection after everything the node executed
// before it: once it is back, every earlier change is recorded.
type Tracker struct {
	n       *table.Node
	queue   string
	mode    string // TrackAuto, TrackReplication or TrackKeyspace
	prefix  string // channel prefix of the node's database: "__keyspace@<db>__:"
	kprefix []byte // the queue's keys: "emq:{q}:"
	pattern string // the queue's keyspace channels
	bchan   string // the barrier channel

	mu       sync.Mutex
	gen      int  // subscription generation
	full     bool // every key must be read again (started, or tracking was lost)
	lost     error
	dirty    map[string]*Change
	members  map[string]bool // keys whose changes are recorded member by member (large keys)
	waits    map[string]chan struct{}
	barriers int // Barrier calls so far: each one's nonce is unique
	events   int64
	restarts int
	fp       string // the node's fingerprint when the subscription began
	stream   bool   // the changes come from the replication stream
	joined   replInfo
	fellBack string // why TrackAuto uses keyspace notifications

	sub     *table.Node
	release func()
	rs      *replStream
}

// StartTracker starts tracking queue on n in the mode asked (TrackAuto
// when empty). Keyspace notifications are turned on for it (the node's
// previous setting recorded). Every key counts as changed until the first
// round reads them all.
func StartTracker(ctx context.Context, n *table.Node, queue, mode string) (*Tracker, error) {
	if mode == "" {
		mode = TrackAuto
	}
	t := &Tracker{
		n: n, queue: queue, mode: mode,
		prefix:  "__keyspace@" + strconv.Itoa(n.Opts.DB) + "__:",
		kprefix: []byte("emq:{" + queue + "}:"),
		bchan:   table.MoveKey(queue) + ":barrier",
		dirty:   map[string]*Change{},
		members: map[string]bool{},
		waits:   map[string]chan struct{}{},
	}
	t.pattern = rewrite.GlobEscape(t.prefix+"emq:{"+queue+"}:") + "*"
	if err := t.subscribe(ctx); err != nil {
		t.closeSub()
		_, _ = ReleaseNotify(context.WithoutCancel(ctx), n, queue)
		return nil, err
	}
	return t, nil
}

// subscribe opens a new subscription (or stream) and marks every key
// changed.
func (t *Tracker) subscribe(ctx context.Context) error {
	t.closeSub()
	if t.mode != TrackKeyspace {
		err := t.openStream(ctx)
		if err == nil {
			return t.began(ctx)
		}
		if t.mode == TrackReplication {
			return fmt.Errorf("%w: --track %s: %v", table.ErrMove, TrackReplication, err)
		}
		t.mu.Lock()
		t.fellBack = err.Error()
		t.mu.Unlock()
	}
	if _, err := acquireNotify(ctx, t.n, t.queue); err != nil {
		return fmt.Errorf("%w: %v", table.ErrMove, err)
	}
	sub, err := table.Dial(t.n.Opts)
	if err != nil {
		return fmt.Errorf("%w: subscribing on %s: %v", table.ErrMove, t.n.Name, err)
	}
	dc, release := sub.C.Dedicate()
	gen := t.begin(false, func() { t.sub, t.release = sub, release })
	errc := dc.SetPubSubHooks(valkey.PubSubHooks{OnMessage: func(m valkey.PubSubMessage) { t.onMessage(gen, m) }})
	go func() {
		err, ok := <-errc
		if !ok || err == nil {
			err = errors.New("the subscription closed")
		}
		t.mu.Lock()
		if t.gen == gen && t.lost == nil {
			t.lost = err
		}
		t.mu.Unlock()
	}()
	if err := dc.Do(ctx, dc.B().Psubscribe().Pattern(t.pattern, rewrite.GlobEscape(t.bchan)).Build()).Error(); err != nil {
		return fmt.Errorf("%w: subscribing on %s: %v", table.ErrMove, t.n.Name, err)
	}
	return t.began(ctx)
}

// begin starts a new generation of the tracking (stream: from the
// replication stream), every key counted as changed; set runs under the
// lock. It returns the generation.
func (t *Tracker) begin(stream bool, set func()) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	t.full, t.lost, t.stream = true, nil, stream
	t.dirty = map[string]*Change{}
	set()
	return t.gen
}

// began records the node's fingerprint once the tracking runs, and waits
// for its first barrier.
func (t *Tracker) began(ctx context.Context) error {
	fp, err := fingerprint(ctx, t.n)
	if err != nil {
		return fmt.Errorf("%w: reading %s: %v", table.ErrMove, t.n.Name, err)
	}
	t.mu.Lock()
	t.fp = fp
	t.mu.Unlock()
	return t.Barrier(ctx)
}

func (t *Tracker) onMessage(gen int, m valkey.PubSubMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gen != t.gen {
		return
	}
	if m.Channel == t.bchan {
		if ch, ok := t.waits[m.Message]; ok {
			close(ch)
			delete(t.waits, m.Message)
		}
		return
	}
	if k, ok := strings.CutPrefix(m.Channel, t.prefix); ok {
		t.dirty[k] = WholeChange()
		t.events++
	}
}

// Barrier publishes a message on the tracker's channel and waits for it:
// when it returns nil, every change the node made before is recorded.
func (t *Tracker) Barrier(ctx context.Context) error {
	t.mu.Lock()
	if t.lost != nil {
		err := t.lost
		t.mu.Unlock()
		return fmt.Errorf("%w on %s: %v", ErrTracking, t.n.Name, err)
	}
	t.barriers++
	nonce := strconv.Itoa(t.gen) + "." + strconv.FormatInt(time.Now().UnixNano(), 10) + "." + strconv.Itoa(t.barriers)
	ch := make(chan struct{})
	t.waits[nonce] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.waits, nonce)
		t.mu.Unlock()
	}()
	got, err := t.n.C.Do(ctx, t.n.C.B().Publish().Channel(t.bchan).Message(nonce).Build()).AsInt64()
	if err != nil {
		return fmt.Errorf("%w on %s: PUBLISH: %v", ErrTracking, t.n.Name, err)
	}
	t.mu.Lock()
	stream := t.stream
	t.mu.Unlock()
	if got == 0 && !stream {
		return fmt.Errorf("%w on %s: the subscription is gone", ErrTracking, t.n.Name)
	}
	timer := time.NewTimer(barrierWait)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		return fmt.Errorf("%w on %s: the barrier message did not arrive within %v", ErrTracking, t.n.Name, barrierWait)
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost != nil {
		return fmt.Errorf("%w on %s: %v", ErrTracking, t.n.Name, t.lost)
	}
	return nil
}

// Settle makes the recorded changes complete up to now: a barrier, then
// the checks that nothing could have changed unseen (the node's
// notification setting still covers the queue, and the node was neither
// restarted, failed over nor flushed). An error means the tracking must
// restart (restart).
func (t *Tracker) Settle(ctx context.Context) error {
	if err := t.Barrier(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	stream := t.stream
	t.mu.Unlock()
	if stream {
		if err := streamAllowed(ctx, t.n); err != nil {
			return fmt.Errorf("%w on %s: %v", ErrTracking, t.n.Name, err)
		}
	} else {
		v, err := GetNotify(ctx, t.n.C)
		if err != nil {
			return fmt.Errorf("%w on %s: %v", ErrTracking, t.n.Name, err)
		}
		if !NotifyCovers(v) {
			return fmt.Errorf("%w on %s: notify-keyspace-events was changed to %q", ErrTracking, t.n.Name, v)
		}
	}
	fp, err := fingerprint(ctx, t.n)
	if err != nil {
		return fmt.Errorf("%w on %s: %v", ErrTracking, t.n.Name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if fp != t.fp {
		return fmt.Errorf("%w on %s: the node restarted, changed role or was flushed (%s, was %s)", ErrTracking, t.n.Name, fp, t.fp)
	}
	return nil
}

// Restart subscribes again after a loss: the notifications turned back on
// if they were turned off, every key counts as changed.
func (t *Tracker) Restart(ctx context.Context, why error) error {
	t.mu.Lock()
	t.restarts++
	t.mu.Unlock()
	if err := t.subscribe(ctx); err != nil {
		return fmt.Errorf("%w: restarting the tracking (%v): %v", table.ErrMove, why, err)
	}
	return nil
}

// take returns the keys changed since the last take (or that every key
// must be read: full) and starts a new set.
func (t *Tracker) take() (keys []string, full bool) {
	ch, full := t.TakeChanges()
	for k := range ch {
		keys = append(keys, k)
	}
	return keys, full
}

// TakeChanges is take with what is known of each key's change.
func (t *Tracker) TakeChanges() (map[string]*Change, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	full := t.full
	t.full = false
	ch := t.dirty
	t.dirty = map[string]*Change{}
	return ch, full
}

// TakeMemberChanges takes, of keys, the changes known member by member,
// leaving every other change pending (and nothing when every key must be
// read again). The mover patches them while a paced copy runs, so that a
// large key written all the time never gathers a change past maxMembers.
func (t *Tracker) TakeMemberChanges(keys []string) map[string]*Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.full || t.lost != nil {
		return nil
	}
	var out map[string]*Change
	for _, k := range keys {
		c, ok := t.dirty[k]
		if !ok || c.Whole {
			continue
		}
		if out == nil {
			out = map[string]*Change{}
		}
		out[k] = c
		delete(t.dirty, k)
	}
	return out
}

// Forget drops what is recorded of key's changes: a copy of it that reads
// it whole starts now (every later change is recorded again), and its
// changes are recorded member by member from now on (other keys' changes
// are whole: they are copied whole).
func (t *Tracker) Forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.dirty, key)
	t.members[key] = true
}

// Requeue counts changes as not copied yet, merged with what changed since.
func (t *Tracker) Requeue(ch map[string]*Change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range ch {
		if d, ok := t.dirty[k]; ok {
			c.Merge(d)
		}
		t.dirty[k] = c
	}
}

// Touched reports whether member of key may have changed since the last
// take (the key changed whole, or a write named the member).
func (t *Tracker) Touched(key, member string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.full || t.lost != nil {
		return true
	}
	c, ok := t.dirty[key]
	if !ok {
		return false
	}
	if c.Whole || c.Head > 0 || c.Tail > 0 {
		return true
	}
	_, ok = c.Members[member]
	return ok
}

// ChangeOf is key's change since the last take (whole when the tracking
// must restart), and whether it changed.
func (t *Tracker) ChangeOf(key string) (*Change, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.full || t.lost != nil {
		return WholeChange(), true
	}
	c, ok := t.dirty[key]
	if !ok {
		return nil, false
	}
	cp := *c
	return &cp, true
}

// MemberLevel reports whether the changes come member by member (the
// replication stream).
func (t *Tracker) MemberLevel() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stream
}

// Source describes where the changes come from, for the mover's output.
func (t *Tracker) Source() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stream {
		how := "joined from its replication backlog"
		switch {
		case t.joined.Full && t.joined.Empty:
			how = fmt.Sprintf("joined by a full synchronisation: the node forked for an empty RDB (%s)", ByteSize(t.joined.Skipped))
		case t.joined.Full:
			how = fmt.Sprintf("joined by a full synchronisation: the node forked, %s of RDB skipped", ByteSize(t.joined.Skipped))
		}
		if t.joined.Delay != "" {
			how += "; " + t.joined.Delay
		}
		return "the replication stream, " + how
	}
	if t.fellBack != "" {
		return "keyspace notifications (not the replication stream: " + t.fellBack + ")"
	}
	return "keyspace notifications"
}

// Pending is the number of keys changed since the last take, and whether
// every key must be read again.
func (t *Tracker) Pending() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty), t.full || t.lost != nil
}

// PendingWhere is the number of keys changed since the last take for which
// keep holds.
func (t *Tracker) PendingWhere(keep func(string) bool) int {
	t.mu.Lock()
	keys := make([]string, 0, len(t.dirty))
	for k := range t.dirty {
		keys = append(keys, k)
	}
	t.mu.Unlock()
	n := 0
	for _, k := range keys {
		if keep(k) {
			n++
		}
	}
	return n
}

// Changed reports whether key changed since the last take.
func (t *Tracker) Changed(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.dirty[key]
	return ok || t.full || t.lost != nil
}

// Counts are the notifications received and the restarts.
func (t *Tracker) Counts() (events int64, restarts int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events, t.restarts
}

func (t *Tracker) closeSub() {
	t.mu.Lock()
	sub, release, rs := t.sub, t.release, t.rs
	t.sub, t.release, t.rs = nil, nil, nil
	t.gen++ // a closed subscription is not a loss
	t.mu.Unlock()
	if release != nil {
		release()
	}
	if sub != nil {
		sub.Close()
	}
	if rs != nil {
		_ = rs.Close()
	}
}

// Stop ends the subscription and gives the node's notification setting
// back (when no other move needs it).
func (t *Tracker) Stop(ctx context.Context) error {
	t.closeSub()
	_, err := ReleaseNotify(ctx, t.n, t.queue)
	return err
}

// fingerprint is what changes when a node's data can change without
// keyspace events: its run (a restart), its replication id (a failover or
// a resynchronisation from a primary), and its counts of FLUSHALL, FLUSHDB
// and SWAPDB.
func fingerprint(ctx context.Context, n *table.Node) (string, error) {
	txt, err := n.C.Do(ctx, n.C.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", err
	}
	rep, err := n.C.Do(ctx, n.C.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		return "", err
	}
	cs, err := n.C.Do(ctx, n.C.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return "", err
	}
	f := infoFields(txt + "\n" + rep)
	calls := func(cmd string) string {
		for _, line := range strings.Split(cs, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				v, _, _ := strings.Cut(rest, ",")
				return v
			}
		}
		return "0"
	}
	return fmt.Sprintf("run %s, replid %s, role %s, flushall %s, flushdb %s, swapdb %s",
		f["run_id"], f["master_replid"], f["role"], calls("flushall"), calls("flushdb"), calls("swapdb")), nil
}

// infoFields parses the "name:value" lines of INFO.
func infoFields(txt string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// ByteSize is n bytes for a person ("1.2 MiB"), as the mover and the copy
// print them.
func ByteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
