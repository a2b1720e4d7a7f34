package control

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

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

// tracker follows the changes of one queue's keys on its source node: a
// pattern subscription to the keyspace channels of the queue's hashtag on
// a connection of its own, and a barrier channel of its own on the same
// connection. A node delivers a client's messages in the order it produced
// them, so once the tracker has received a barrier message it published,
// it has received the notification of every write the node executed
// before it.
type tracker struct {
	n       *Node
	queue   string
	prefix  string // channel prefix of the node's database: "__keyspace@<db>__:"
	pattern string // the queue's keyspace channels
	bchan   string // the barrier channel

	mu       sync.Mutex
	gen      int  // subscription generation
	full     bool // every key must be read again (started, or tracking was lost)
	lost     error
	dirty    map[string]struct{}
	waits    map[string]chan struct{}
	events   int64
	restarts int
	fp       string // the node's fingerprint when the subscription began

	sub     *Node
	release func()
}

// startTracker turns on the node's keyspace notifications (recording its
// previous setting) and subscribes. Every key counts as changed until the
// first round reads them all.
func startTracker(ctx context.Context, n *Node, queue string) (*tracker, error) {
	t := &tracker{
		n: n, queue: queue,
		prefix: "__keyspace@" + strconv.Itoa(n.Opts.DB) + "__:",
		bchan:  keyMove + queue + ":barrier",
		dirty:  map[string]struct{}{},
		waits:  map[string]chan struct{}{},
	}
	t.pattern = rewrite.GlobEscape(t.prefix+"emq:{"+queue+"}:") + "*"
	if _, err := acquireNotify(ctx, n, queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMove, err)
	}
	if err := t.subscribe(ctx); err != nil {
		t.closeSub()
		_, _ = releaseNotify(context.WithoutCancel(ctx), n, queue)
		return nil, err
	}
	return t, nil
}

// subscribe opens a new subscription and marks every key changed.
func (t *tracker) subscribe(ctx context.Context) error {
	t.closeSub()
	sub, err := Dial(t.n.Opts)
	if err != nil {
		return fmt.Errorf("%w: subscribing on %s: %v", ErrMove, t.n.Name, err)
	}
	dc, release := sub.C.Dedicate()
	t.mu.Lock()
	t.gen++
	gen := t.gen
	t.full, t.lost = true, nil
	t.dirty = map[string]struct{}{}
	t.sub, t.release = sub, release
	t.mu.Unlock()
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
		return fmt.Errorf("%w: subscribing on %s: %v", ErrMove, t.n.Name, err)
	}
	fp, err := fingerprint(ctx, t.n)
	if err != nil {
		return fmt.Errorf("%w: reading %s: %v", ErrMove, t.n.Name, err)
	}
	t.mu.Lock()
	t.fp = fp
	t.mu.Unlock()
	return t.barrier(ctx)
}

func (t *tracker) onMessage(gen int, m valkey.PubSubMessage) {
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
		t.dirty[k] = struct{}{}
		t.events++
	}
}

// barrier publishes a message on the tracker's channel and waits for it:
// when it returns nil, every change the node made before is recorded.
func (t *tracker) barrier(ctx context.Context) error {
	t.mu.Lock()
	if t.lost != nil {
		err := t.lost
		t.mu.Unlock()
		return fmt.Errorf("%w on %s: %v", ErrTracking, t.n.Name, err)
	}
	nonce := strconv.Itoa(t.gen) + "." + strconv.FormatInt(time.Now().UnixNano(), 10)
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
	if got == 0 {
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

// settle makes the recorded changes complete up to now: a barrier, then
// the checks that nothing could have changed unseen (the node's
// notification setting still covers the queue, and the node was neither
// restarted, failed over nor flushed). An error means the tracking must
// restart (restart).
func (t *tracker) settle(ctx context.Context) error {
	if err := t.barrier(ctx); err != nil {
		return err
	}
	v, err := getNotify(ctx, t.n.C)
	if err != nil {
		return fmt.Errorf("%w on %s: %v", ErrTracking, t.n.Name, err)
	}
	if !notifyCovers(v) {
		return fmt.Errorf("%w on %s: notify-keyspace-events was changed to %q", ErrTracking, t.n.Name, v)
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

// restart subscribes again after a loss: the notifications turned back on
// if they were turned off, every key counts as changed.
func (t *tracker) restart(ctx context.Context, why error) error {
	t.mu.Lock()
	t.restarts++
	t.mu.Unlock()
	if _, err := acquireNotify(ctx, t.n, t.queue); err != nil {
		return fmt.Errorf("%w: restarting the tracking (%v): %v", ErrMove, why, err)
	}
	return t.subscribe(ctx)
}

// take returns the keys changed since the last take (or that every key
// must be read: full) and starts a new set.
func (t *tracker) take() (keys []string, full bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	full, t.full = t.full, false
	for k := range t.dirty {
		keys = append(keys, k)
	}
	t.dirty = map[string]struct{}{}
	return keys, full
}

// markChanged counts keys as changed again (a copy of them that did not
// finish).
func (t *tracker) markChanged(keys []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		t.dirty[k] = struct{}{}
	}
}

// pending is the number of keys changed since the last take, and whether
// every key must be read again.
func (t *tracker) pending() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty), t.full || t.lost != nil
}

// pendingWhere is the number of keys changed since the last take for which
// keep holds.
func (t *tracker) pendingWhere(keep func(string) bool) int {
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

// changed reports whether key changed since the last take.
func (t *tracker) changed(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.dirty[key]
	return ok || t.full || t.lost != nil
}

// counts are the notifications received and the restarts.
func (t *tracker) counts() (events int64, restarts int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events, t.restarts
}

func (t *tracker) closeSub() {
	t.mu.Lock()
	sub, release := t.sub, t.release
	t.sub, t.release = nil, nil
	t.gen++ // a closed subscription is not a loss
	t.mu.Unlock()
	if release != nil {
		release()
	}
	if sub != nil {
		sub.Close()
	}
}

// stop ends the subscription and gives the node's notification setting
// back (when no other move needs it).
func (t *tracker) stop(ctx context.Context) error {
	t.closeSub()
	_, err := releaseNotify(ctx, t.n, t.queue)
	return err
}

// fingerprint is what changes when a node's data can change without
// keyspace events: its run (a restart), its replication id (a failover or
// a resynchronisation from a primary), and its counts of FLUSHALL, FLUSHDB
// and SWAPDB.
func fingerprint(ctx context.Context, n *Node) (string, error) {
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
