package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"
	"golang.org/x/sync/errgroup"
)

// Defaults of the copy while serving.
const (
	// DefaultTailKeys: the rounds end when a round leaves at most this
	// many changed keys (or stops shrinking the remainder).
	DefaultTailKeys = 1000
	// DefaultMaxHold bounds the work under the hold when Mover.MaxHold is
	// not set (the command line's default is timeouts.hold / 2): past it
	// the queue is released and copied again while served.
	DefaultMaxHold = 2500 * time.Millisecond
	// maxRounds bounds the rounds of one stage that still shrink the
	// remainder: then the mover plans the hold as if they had converged.
	maxRounds = 50
	// maxBehind is how long the rounds may converge to a remainder a hold
	// cannot take within --max-hold (the queue's keys change about as fast
	// as the target takes them, or faster) before the move gives up.
	maxBehind = time.Minute
	// maxAllRounds bounds the rounds of one copy while served, whatever
	// ends them (a tracking lost again and again).
	maxAllRounds = 20 * maxRounds
	// maxHolds is how many holds a move tries before it gives up.
	maxHolds = 3
	// maxOver is how many rounds may end with large keys too slow to
	// compare under the hold before the move gives up.
	maxOver = 5
	// tailPasses bounds the passes under one hold (each copies what
	// changed during the previous one: writers that bypass the proxies).
	tailPasses = 4
)

// online is the move of a queue copied while it is served: rounds of copy
// (the first reads every key, the next ones the keys that changed), then
// the hold for what changed last. It returns with the record at step
// copied and the report's copy figures.
func (m *Mover) online(ctx context.Context, src, dst *table.Node, rec *record, rep *Report) (err error) {
	tr, err := tail.StartTracker(ctx, src, m.Queue, m.Track)
	if err != nil {
		return err
	}
	// Runs last: after the tracking stopped, a copy given up is deleted.
	defer func() { err = m.failedCopy(ctx, dst, rec, err) }()
	defer func() {
		if errors.Is(err, ErrStopped) {
			return // as if killed: --resume or --abort restores the node's setting
		}
		if serr := tr.Stop(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = fmt.Errorf("%w: %v", table.ErrMove, serr)
		}
	}()
	m.say("tracking changes of %s on %s: %s", m.Queue, src.Name, tr.Source())
	cp := keycopy.NewCopier(src, dst, m.Queue, m.Rate, m.largeKey(), m.Chunk, tr)
	cp.Tell(m.say)
	if err := cp.DialRows(); err != nil {
		return err
	}
	defer cp.Close()
	pr := keycopy.StartProgress(ctx, src, m.Queue, m.ProgressEvery, m.say, cp, tr)
	defer pr.Stop()
	t0 := time.Now()
	for holds := 0; ; holds++ {
		for {
			if err := m.rounds(ctx, cp, tr, pr, rep, rec); err != nil {
				return err
			}
			waited, err := m.awaitReplicas(ctx, pr, src, dst)
			if err != nil {
				return err
			}
			if !waited {
				if waited, err = m.awaitUpstreams(ctx, pr, src); err != nil {
					return err
				}
			}
			if !waited {
				break
			}
			// The queue changed while the mover waited: a round first.
		}
		if err := cp.SameServers(ctx); err != nil {
			return err
		}
		if err := m.stop(StepCopying); err != nil {
			return err
		}
		if holds == maxHolds {
			return fmt.Errorf("%w: %d holds of %s could not copy what changed within --max-hold %v: the queue is served by %s again; "+
				"--resume tries again, --abort drops the move", table.ErrMove, maxHolds, m.Queue, m.maxHold(), src.Name)
		}
		rep.PreCopy = time.Since(t0)
		if err := cp.Recount(ctx); err != nil {
			return err
		}
		top, err := m.maxEpoch(ctx)
		if err != nil {
			return err
		}
		rec.epoch = top + 1
		rec.held = time.Now().UnixMilli()
		if err := m.hold(ctx, src, rec); err != nil {
			return err
		}
		pr.Phase("held")
		if err := m.stop(StepHeld); err != nil {
			return err
		}
		done, why, err := m.tail(ctx, src, cp, tr, rep, rec)
		if errors.Is(err, ErrSuperseded) {
			return err // the hold is not the mover's to release any more
		}
		if err != nil || !done {
			if rerr := m.release(ctx, src, rec); rerr != nil {
				if err == nil {
					return fmt.Errorf("%w: %s; %v", table.ErrMove, why, rerr)
				}
				return fmt.Errorf("%w: %v; releasing the hold failed too: %v (the queue may stay held: --resume or --abort)", table.ErrMove, err, rerr)
			}
			if err != nil {
				return fmt.Errorf("%w (the queue is served by %s again; --resume tries again, --abort drops the move)", err, src.Name)
			}
			rep.Released++
			m.say("released %s: %s; copying again while it is served", m.Queue, why)
			if err := cp.RecountTarget(ctx); err != nil {
				return err
			}
			pr.Phase("copying")
			continue
		}
		break
	}
	m.fill(cp, tr, rep)
	return nil
}

// rounds copies while the queue is served until little is left for the
// hold. The first round (and the one after the tracking was lost) reads
// every key at --rate: that bulk read is what --rate protects the source
// from. The next rounds copy the keys that changed, unpaced: their reads
// follow the clients' own writes (a key read once per round however often
// it was written), so the remainder shrinks whenever the target takes
// changes faster than the clients make them, whatever --rate is. Only the
// large keys that changed whole are read whole again, at --rate.
//
// Large keys that change are compared in one round of their own: the
// small keys' rounds converge first (the large keys that change meanwhile
// wait), then one round compares the large keys, then the small keys
// converge again, and the hold follows. A large key written all the time is
// compared under the hold anyway; comparing it in every round would only
// leave more small keys for the hold.
//
// The hold starts only when its work fits within --max-hold at the rates
// measured so far (holdPlan); until then the mover says what it waits
// for. When the queue's keys change faster than the target takes them,
// the mover says so with both rates and does not hold, and it stops after
// maxBehind of that, the queue served as before.
func (m *Mover) rounds(ctx context.Context, cp *keycopy.Copier, tr *tail.Tracker, pr *keycopy.Reporter, rep *Report, rec *record) error {
	prev, over, inStage := -1, 0, 0
	withLarge, compared := true, false // the first round copies every key, large ones too
	var behind time.Time               // since when the rounds converge to a tail the hold cannot take (zero: they do not)
	for round := 1; ; round++ {
		if round > maxAllRounds {
			_, restarts := tr.Counts()
			return fmt.Errorf("%w: the copy of %s did not converge in %d rounds (the tracking restarted %d times). Nothing is held; "+
				"%s serves the queue as before; --resume tries again, --abort drops the copy", table.ErrMove, m.Queue, maxAllRounds, restarts, cp.Src.Name)
		}
		if _, lost := tr.Pending(); lost {
			if err := tr.Settle(ctx); err != nil {
				m.say("%v: tracking again, every key is read again", err)
				if err := tr.Restart(ctx, err); err != nil {
					return err
				}
			}
		}
		rep.Rounds++
		pr.Round(rep.Rounds)
		t0 := time.Now()
		k0, b0 := cp.St.Snapshot()
		chs, full := tr.TakeChanges()
		thisLarge := withLarge || full
		var err error
		if full {
			err = m.fullRound(ctx, cp, pr, rec)
		} else {
			err = m.changedRound(ctx, cp, chs, true, thisLarge)
		}
		if err != nil {
			return err
		}
		if err := tr.Settle(ctx); err != nil {
			m.say("%v: tracking again, every key is read again", err)
			if err := tr.Restart(ctx, err); err != nil {
				return err
			}
			prev, inStage, withLarge, compared, behind = -1, 0, true, false, time.Time{}
			continue
		}
		if err := m.verifyChunked(ctx, cp, tr); err != nil {
			return err
		}
		if err := m.checkRecord(ctx, cp.Src, rec); err != nil {
			return err
		}
		n := tr.PendingWhere(func(k string) bool { return !cp.IsLarge(k) })
		k1, b1 := cp.St.Snapshot()
		d := time.Since(t0)
		what, pace := "keys", "unpaced"
		if thisLarge {
			what = "keys, large ones too"
		}
		if full {
			pace = "every key"
			if m.Rate > 0 {
				pace += " at --rate " + tail.ByteSize(m.Rate) + "/s"
			}
		}
		changing := float64(n) / max(d.Seconds(), 1e-6) // the keys the clients changed per second of the round
		m.say("round %d (%s): %d %s (%s) in %v, %.0f keys/s; %d small keys changed meanwhile (%.0f keys/s)", rep.Rounds, pace, k1-k0, what, tail.ByteSize(b1-b0),
			d.Round(time.Millisecond), float64(k1-k0)/max(d.Seconds(), 1e-6), n, changing)
		inStage++
		converged := n <= m.tailKeys() || (prev >= 0 && inStage >= 2 && n*5 > prev*4) || inStage >= maxRounds
		prev = n
		withLarge = false
		if thisLarge && !full {
			compared = true
		}
		switch {
		case !converged:
			continue
		case !compared:
			// The small keys converged: a round for the large keys next.
			withLarge, prev, inStage = true, -1, 0
			continue
		}
		plan := cp.HoldEstimate(tr, n)
		if plan.Fits(m.maxHold()) {
			m.say("holding: %s, within --max-hold %v", plan.Work(), m.maxHold())
			return nil
		}
		if plan.SmallOver(m.maxHold()) {
			if behind.IsZero() {
				behind = time.Now()
			}
			if plan.Rate > 0 && changing >= plan.Rate*9/10 {
				// The rounds cannot shrink: the clients change the queue's
				// keys about as fast as the target takes them, or faster.
				if time.Since(behind) >= maxBehind {
					return fmt.Errorf("%w: the queue's keys change faster than %s takes them (%.0f keys/s changed, %.0f keys/s copied) for %v: "+
						"a hold would not fit within --max-hold %v. Nothing is held; %s serves the queue as before. Move it when it is quieter, "+
						"or with a larger --max-hold (calls on the queue wait up to timeouts.hold, then get TRYAGAIN); --resume tries again, --abort drops the copy",
						table.ErrMove, cp.Dst.Name, changing, plan.Rate, maxBehind, m.maxHold(), cp.Src.Name)
				}
				m.say("not holding: the queue's keys change faster than %s takes them (%.0f keys/s changed, %.0f keys/s copied); %s, past --max-hold %v: copying again",
					cp.Dst.Name, changing, plan.Rate, plan.Work(), m.maxHold())
			} else {
				if time.Since(behind) >= maxBehind {
					return fmt.Errorf("%w: for %v the changed keys of %s would take longer to copy under a hold than --max-hold %v allows (%s). "+
						"Nothing is held; %s serves the queue as before; --resume tries again, --abort drops the copy",
						table.ErrMove, maxBehind, m.Queue, m.maxHold(), plan.Work(), cp.Src.Name)
				}
				m.say("not holding yet: %s, past --max-hold %v: copying again while served", plan.Work(), m.maxHold())
			}
			prev, inStage = -1, 0
			continue
		}
		took := "about " + plan.Large.Round(time.Millisecond).String()
		if plan.Large >= keycopy.CutHold {
			took = "longer than that (a hold was released before they were compared)"
		}
		if over++; over >= maxOver {
			return fmt.Errorf("%w: the large keys %s changed in every round; comparing them under the hold takes %s, past --max-hold %v. "+
				"Nothing is held; %s serves the queue as before. Move it when they are quieter, or with a larger --max-hold "+
				"(calls on the queue wait up to timeouts.hold, then get TRYAGAIN); --resume tries again, --abort drops the copy",
				table.ErrMove, strings.Join(plan.LargeKeys, ", "), strings.Replace(took, "that", "--max-hold", 1), m.maxHold(), cp.Src.Name)
		}
		m.say("the large keys %s changed during the round; comparing them under the hold takes %s, past --max-hold %v: copying again",
			strings.Join(plan.LargeKeys, ", "), strings.Replace(took, "that", "--max-hold", 1), m.maxHold())
		withLarge, prev, inStage = true, -1, 0
	}
}

// DefaultReplicaWait is Mover.ReplicaWait's usual value (queue move sets
// it, bounded by its --deadline).
const DefaultReplicaWait = 30 * time.Second

// replicaPoll is the pause between two confirmations awaitReplicas asks.
const replicaPoll = 200 * time.Millisecond

// awaitReplicas confirms, before a hold, that the replicas of each node
// have the mover's writes so far (table.Node.Confirm: a node's
// ack_replicas within its ack timeout), and while they do not, because a
// replica is down, resyncing or slow (table.ReplicasBehind), or the
// connection was lost (a node closing its clients' connections, or
// restarting: the copy's SameServers, after, tells), waits for them
// until waitEnd, saying so (queue status shows it in the move's
// progress). Both confirmations are asked again under the hold
// (the hold's record on the source, the copy on the target), where a
// refusal releases the hold and ends the attempt, which throws the copy
// away: the replica a fault took away is waited for here, while the queue
// is served and the copy kept. waited: it did wait (the queue changed
// meanwhile: a round before the hold).
func (m *Mover) awaitReplicas(ctx context.Context, pr *keycopy.Reporter, src, dst *table.Node) (waited bool, err error) {
	if m.ReplicaWait <= 0 {
		return false, nil // the hold's own confirmations decide, at once
	}
	end := m.waitEnd()
	defer m.phaseBack(pr, &waited)
	for _, n := range []*table.Node{src, dst} {
		err := m.waitFor(ctx, pr, end, &waited, func() error { return n.Confirm(ctx) }, func(err error) bool {
			var rb *table.ReplicasBehind
			return errors.As(err, &rb) || keycopy.ConnectionLost(err)
		}, func(err error, left time.Duration) (string, string) {
			return fmt.Sprintf("waiting up to %v for the replicas before holding %s: %v", left, m.Queue, err),
				fmt.Sprintf("waiting for the replicas of %s (%v)", n.Name, err)
		})
		if err != nil && ctx.Err() != nil {
			return waited, ctx.Err()
		}
		if err != nil {
			return waited, fmt.Errorf("%w: before holding %s: %v (the queue is served by %s as before; --resume tries again, --abort drops the move)",
				table.ErrMove, m.Queue, err, src.Name)
		}
	}
	if waited {
		m.say("the replicas confirmed the mover's writes: a round, then the hold")
	}
	return waited, nil
}

// waitFor asks check until it answers nil and, while what it answers is
// a fault to wait out (mayWait) and end has not passed, asks again
// replicaPoll later. The first wait (waited set) is said, with what
// first gives: the mover's line and the progress phase (queue status).
// It returns check's last error, or ctx's.
func (m *Mover) waitFor(ctx context.Context, pr *keycopy.Reporter, end time.Time, waited *bool, check func() error, mayWait func(error) bool,
	first func(err error, left time.Duration) (line, phase string)) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !mayWait(err) || time.Now().After(end) {
			return err
		}
		if !*waited {
			line, phase := first(err, time.Until(end).Round(time.Second))
			m.say("%s", line)
			pr.Phase(phase)
		}
		*waited = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(replicaPoll):
		}
	}
}

// phaseBack puts the progress phase back to copying after a wait.
func (m *Mover) phaseBack(pr *keycopy.Reporter, waited *bool) {
	if *waited {
		pr.Phase("copying")
	}
}

// waitEnd is when a wait before a hold (awaitReplicas, awaitUpstreams)
// begun now gives up: ReplicaWait later, and no later than Until.
func (m *Mover) waitEnd() time.Time {
	end := time.Now().Add(m.ReplicaWait)
	if !m.Until.IsZero() && m.Until.Before(end) {
		end = m.Until
	}
	return end
}

// awaitUpstreams reads, before a hold, what the hold's epoch must be
// above (maxEpoch: the control table and the proxies' registrations of
// every upstream) and, while an upstream does not answer (a node
// restarting, failing over or stopped: ErrUnreachable), waits for it
// until waitEnd, saying so, as awaitReplicas waits for the replicas:
// the queue is served by its source meanwhile and the copy is kept. The
// upstream away may be neither the source nor the target: stopping the
// attempt there threw away a copy that no fault had made stale. waited:
// it did wait (a round before the hold).
func (m *Mover) awaitUpstreams(ctx context.Context, pr *keycopy.Reporter, src *table.Node) (waited bool, err error) {
	defer m.phaseBack(pr, &waited)
	err = m.waitFor(ctx, pr, m.waitEnd(), &waited, func() error { _, err := m.maxEpoch(ctx); return err },
		func(err error) bool { return errors.Is(err, ErrUnreachable) },
		func(err error, left time.Duration) (string, string) {
			return fmt.Sprintf("waiting up to %v for every upstream to answer before holding %s: %v", left, m.Queue, err),
				fmt.Sprintf("waiting for every upstream to answer (%v)", err)
		})
	if err != nil && ctx.Err() != nil {
		return waited, ctx.Err()
	}
	if err != nil {
		return waited, fmt.Errorf("%w (before holding %s; the queue is served by %s as before)", err, m.Queue, src.Name)
	}
	if waited {
		m.say("every upstream answered: a round, then the hold")
	}
	return waited, nil
}

// fullRound empties the target's keys of the queue and copies every key of
// the source, at --rate: the bulk copy --rate protects the source from.
//
// What the clients write meanwhile is not read again at --rate; it reaches
// the target unpaced, at the pace of the writes, so that a queue whose keys
// change faster than --rate reads them still converges:
//
//   - the job-core sets (the keys written by every call) are copied
//     beside the rows, and once copied their changes, known member by
//     member from the replication stream, are patched every patchEvery
//     while the rows are copied (patchWhile);
//   - a row the tracker counts as changed since the round began is skipped
//     here: the next round, unpaced, copies it (jobs enqueued during the
//     round are all such rows).
func (m *Mover) fullRound(ctx context.Context, cp *keycopy.Copier, pr *keycopy.Reporter, rec *record) error {
	if err := m.wipeTarget(ctx, cp, rec); err != nil {
		return err
	}
	core := cp.CoreKeys()
	largeCore, err := cp.CopyKeys(ctx, core, true)
	if err != nil {
		return err
	}
	// The large job-core sets are copied in chunks and verified while the
	// rows are copied (neither reads the other's keys); the patches of the
	// sets begin once their copies are verified bases. (Not before: a patch
	// takes the changes a verification names to excuse a difference.)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	patching := make(chan func() error, 1)
	go func() {
		err := m.copyLarge(sctx, cp, wholeChanges(largeCore), true)
		if err == nil {
			err = m.verifyBeside(sctx, cp)
		}
		if err != nil {
			cancel()
			patching <- func() error { return err }
			return
		}
		patching <- m.patchWhile(sctx, cp)
	}()
	pages := make(chan []string, 4)
	scanErr := make(chan error, 1)
	go func() {
		defer close(pages)
		scanErr <- cp.ScanSource(sctx, func(keys []string, frac float64) error {
			keys = slices.DeleteFunc(keys, func(k string) bool {
				return slices.Contains(core, k) || (cp.IsRow(k) && cp.Tr.Changed(k))
			})
			select {
			case pages <- keys:
				pr.Scanned(frac)
				return nil
			case <-sctx.Done():
				return sctx.Err()
			}
		})
	}()
	large, err := cp.CopyStream(sctx, pages, true, true)
	if err != nil {
		cancel()
	}
	for range pages {
	}
	if serr := <-scanErr; err == nil && serr != nil && !errors.Is(serr, context.Canceled) {
		err = serr
	}
	// The sets' copy or patches failed first: the rows' error is the
	// cancellation it caused.
	if perr := (<-patching)(); perr != nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = perr
	}
	cancel()
	if err != nil {
		return err
	}
	return m.copyLarge(ctx, cp, wholeChanges(large), true)
}

// verifyBeside is verifyChunked for the sets the first round copied,
// beside its rows. A verification cut by the loss of the tracking is not
// the round's error: the keys stay unverified, and the round ends as it
// would have without it, where rounds settles the tracking: it restarts
// it and copies every key again, or, the tracking whole, verifies them
// then.
func (m *Mover) verifyBeside(ctx context.Context, cp *keycopy.Copier) error {
	cp.Mu.Lock()
	keys := slices.Clone(cp.Unverified)
	cp.Mu.Unlock()
	err := m.verifyChunked(ctx, cp, cp.Tr)
	if !errors.Is(err, tail.ErrTracking) {
		return err
	}
	cp.Mu.Lock()
	cp.Unverified = append(cp.Unverified, keys...)
	cp.Mu.Unlock()
	return nil
}

// patchEvery is how often patchWhile patches the large keys' changes.
const patchEvery = 200 * time.Millisecond

// patchWhile patches, every patchEvery until the function it returns is
// called, the changes known member by member of the large keys whose copy
// is a base (patch.go), unpaced: their cost follows the writes. A large
// key written all the time (the pending set of a busy queue) then never
// gathers more changes than a patch takes, nor becomes a change to read
// whole again at --rate. The function returned waits for the patch under
// way and returns the first error.
//
// Nothing else copies or patches these keys while it runs (fullRound
// starts it once their copies are done, and leaves them out of its scan),
// so no two patches
// of one key race.
func (m *Mover) patchWhile(ctx context.Context, cp *keycopy.Copier) func() error {
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(patchEvery)
		defer tick.Stop()
		for {
			var based []string
			for _, k := range cp.LargeKeys() {
				if cp.Based(k) {
					based = append(based, k)
				}
			}
			for k, ch := range cp.Tr.TakeMemberChanges(based) {
				if _, err := cp.Patch(ctx, k, ch, false); err != nil {
					done <- err
					return
				}
			}
			select {
			case <-stop:
				done <- nil
				return
			case <-ctx.Done():
				done <- nil
				return
			case <-tick.C:
			}
		}
	}()
	return func() error {
		close(stop)
		return <-done
	}
}

// wholeChanges is keys, each changed whole.
func wholeChanges(keys []string) map[string]*tail.Change {
	out := make(map[string]*tail.Change, len(keys))
	for _, k := range keys {
		out[k] = tail.WholeChange()
	}
	return out
}

// changedRound copies the keys that changed. A large key whose change is
// known member by member is patched (its cost follows the change); one
// that changed whole only withLarge (else it counts as changed again, for
// a later round).
//
// served: the queue is served (not held). Either way the small keys and
// the patches are copied unpaced: their reads follow the clients' writes.
// While served, a large key read whole (a comparison, or a copy in chunks)
// is paced by --rate, one at a time, and the small keys' copy is timed:
// the rate the hold is planned with.
func (m *Mover) changedRound(ctx context.Context, cp *keycopy.Copier, chs map[string]*tail.Change, served, withLarge bool) error {
	var small []string
	large := map[string]*tail.Change{}
	later := map[string]*tail.Change{}
	for k, ch := range chs {
		switch {
		case !cp.IsLarge(k):
			small = append(small, k)
		case withLarge || cp.Patchable(k, ch):
			large[k] = ch
		default:
			later[k] = ch
		}
	}
	t0 := time.Now()
	found, err := cp.CopyKeys(ctx, small, false)
	if err != nil {
		return err
	}
	if served && len(small) > 0 {
		cp.St.MeasureTail(len(small), time.Since(t0))
	}
	for _, k := range found { // small keys that grew large: copied in chunks
		if withLarge {
			large[k] = tail.WholeChange()
		} else {
			later[k] = tail.WholeChange()
		}
	}
	cp.Tr.Requeue(later)
	return m.copyLarge(ctx, cp, large, served)
}

// copyLarge patches, copies or compares each large key; the ones copied
// in chunks are verified later (verifyChunked). Patches are never paced
// (their cost follows the change). While served (paced) a key read whole
// is paced by --rate, one key at a time; under the hold, up to
// largeParallel keys at once, unpaced.
func (m *Mover) copyLarge(ctx context.Context, cp *keycopy.Copier, chs map[string]*tail.Change, paced bool) error {
	var g errgroup.Group
	g.SetLimit(largeParallel(cp, paced))
	for _, k := range slices.Sorted(maps.Keys(chs)) {
		g.Go(func() error {
			t0 := time.Now()
			var res keycopy.LargeResult
			var err error
			ch := chs[k]
			patched := cp.Patchable(k, ch)
			if patched {
				res, err = cp.Patch(ctx, k, ch, paced)
			} else {
				// While served with member-level changes, a rebuild: it
				// leaves a base for the patches that follow.
				done := cp.Busy("copying " + k)
				res, err = cp.SyncLarge(ctx, k, paced, paced && cp.Tr != nil && cp.Tr.MemberLevel())
				done()
			}
			cp.Mu.Lock()
			defer cp.Mu.Unlock()
			if !paced && !patched {
				// How long the key takes unpaced: the estimate of the next
				// hold (past --max-hold when the hold's deadline cut it).
				d := time.Since(t0)
				if ctx.Err() != nil {
					d = keycopy.CutHold
				}
				cp.LastSync[k] = d
			}
			if err == nil && res.Copied {
				cp.Unverified = append(cp.Unverified, k)
			}
			return err
		})
	}
	return g.Wait()
}

// largeParallel is how many large keys are read whole at once: one while
// paced by --rate (the pace is per key), else keycopy.LargeParallel.
func largeParallel(cp *keycopy.Copier, paced bool) int {
	if paced && cp.Lim != nil {
		return 1
	}
	return keycopy.LargeParallel
}

// verifyChunked compares each key copied in chunks that has not changed
// since (the tracker is settled): a difference found while the key did not
// change is an error. Keys that changed are compared when copied again.
func (m *Mover) verifyChunked(ctx context.Context, cp *keycopy.Copier, tr *tail.Tracker) error {
	cp.Mu.Lock()
	keys := cp.Unverified
	cp.Unverified = nil
	cp.Mu.Unlock()
	var g errgroup.Group
	g.SetLimit(largeParallel(cp, true))
	for _, k := range keys {
		g.Go(func() error { return m.verifyOne(ctx, cp, tr, k) })
	}
	return g.Wait()
}

// verifyOne is verifyChunked for one key.
func (m *Mover) verifyOne(ctx context.Context, cp *keycopy.Copier, tr *tail.Tracker, k string) error {
	if tr.MemberLevel() && cp.Based(k) {
		done := cp.Busy("verifying " + k)
		defer done()
		return cp.ScanVerify(ctx, k)
	}
	if tr.Changed(k) {
		return nil
	}
	done := cp.Busy("verifying " + k)
	res, err := cp.SyncLarge(ctx, k, false, false)
	done()
	if err != nil || res.Diffs == 0 {
		return err
	}
	if err := tr.Barrier(ctx); err != nil {
		return err
	}
	if !tr.Changed(k) {
		return fmt.Errorf("%w: verifying %s on %s: %d elements differ from the source's after a chunked copy", table.ErrMove, k, cp.Dst.Name, res.Diffs)
	}
	return nil
}

// tail runs under the hold: what changed since the last round is copied
// and verified, then again for what changed meanwhile (writers that bypass
// the proxies), until nothing did. It returns false (and why) when the
// hold must be released: the tracking was lost, or the hold's work passed
// --max-hold.
func (m *Mover) tail(ctx context.Context, src *table.Node, cp *keycopy.Copier, tr *tail.Tracker, rep *Report, rec *record) (done bool, why string, err error) {
	if err := m.waitAcks(ctx, src, rec.epoch, rep); err != nil {
		return false, "", err
	}
	t0 := time.Now()
	rep.TailKeys = 0
	// The copy under the hold stops at --max-hold; what it took is copied
	// again (it may be half written on the target).
	hctx, cancel := context.WithDeadline(ctx, t0.Add(m.maxHold()))
	defer cancel()
	taken := map[string]*tail.Change{}
	defer func() {
		if !done {
			tr.Requeue(taken)
		}
	}()
	late := func(err error) (bool, string, error) {
		if hctx.Err() != nil && ctx.Err() == nil {
			return false, fmt.Sprintf("the copy under the hold passed --max-hold %v", m.maxHold()), nil
		}
		return false, "", err
	}
	for pass := 0; pass < tailPasses; pass++ {
		if err := tr.Settle(ctx); err != nil {
			if rerr := tr.Restart(ctx, err); rerr != nil {
				return false, "", rerr
			}
			return false, err.Error(), nil
		}
		chs, full := tr.TakeChanges()
		if full {
			return false, "the tracking restarted", nil
		}
		if pass > 0 && len(chs) == 0 {
			// The last check: every large key has as many elements on
			// both nodes. One that has not is compared whole (the source
			// is held: that comparison is exact), and the passes go on.
			// (Two pipelines of O(1) commands: not cut by --max-hold.)
			bad, err := cp.SameSize(ctx, cp.LargeKeys())
			if err != nil {
				return late(err)
			}
			if len(bad) > 0 {
				cp.St.Mu.Lock()
				cp.St.Whole += int64(len(bad))
				cp.St.Mu.Unlock()
				m.say("under the hold, %s differ in size on %s after the patches: comparing them whole", strings.Join(bad, ", "), cp.Dst.Name)
				for _, k := range bad {
					cp.SetBased(k, false)
				}
				chs = wholeChanges(bad)
			}
		}
		if pass > 0 && len(chs) == 0 {
			if err := cp.SameServers(hctx); err != nil {
				return late(err)
			}
			if err := cp.Recount(hctx); err != nil {
				return late(err)
			}
			if err := m.setStep(ctx, src, rec, StepHeld, StepCopied, m.inventoryFields(cp)...); err != nil {
				return false, "", err
			}
			rep.HoldWork = time.Since(t0)
			m.say("copied and verified the last %d changed keys of %s under the hold in %v", rep.TailKeys, m.Queue, rep.HoldWork.Round(time.Millisecond))
			return true, "", nil
		}
		for k, ch := range chs {
			if t, ok := taken[k]; ok {
				t.Merge(ch)
			} else {
				taken[k] = ch
			}
		}
		rep.TailKeys += len(chs)
		// The target is written without a fence of its own: a mover
		// superseded while it was stalled (a --resume that flipped the
		// queue since) must not copy the source's keys over the live
		// ones. The check narrows that to one pass (docs/queue-move.md).
		if err := m.checkRecord(ctx, src, rec); err != nil {
			return false, "", err
		}
		if err := m.changedRound(hctx, cp, chs, false, true); err != nil {
			return late(err)
		}
		// Keys copied in chunks under the hold are compared now: the
		// source does not change while held (the next settle checks it).
		if err := m.verifyChunked(hctx, cp, tr); err != nil {
			return late(err)
		}
	}
	return false, "writers kept changing the queue on the source under the hold (clients that bypass the proxies?)", nil
}

// inventoryFields are the record fields of the verified copy's counts.
func (m *Mover) inventoryFields(cp *keycopy.Copier) []string {
	cp.Inv.Mu.Lock()
	defer cp.Inv.Mu.Unlock()
	var other []string
	for k := range cp.Inv.Other {
		other = append(other, k)
	}
	return []string{"keys", strconv.FormatInt(cp.Inv.Keys, 10), "rows", strconv.FormatInt(cp.Inv.Rows, 10), "other", strings.Join(sortedCap(other, 100), "\n")}
}

// fill puts the copy's figures into the report.
func (m *Mover) fill(cp *keycopy.Copier, tr *tail.Tracker, rep *Report) {
	cp.Inv.Mu.Lock()
	rep.Keys = int(cp.Inv.Keys)
	rep.Rows = cp.Inv.Rows
	for k := range cp.Inv.Other {
		rep.Other = append(rep.Other, k)
	}
	cp.Inv.Mu.Unlock()
	rep.Other = sortedCap(rep.Other, 100)
	keys, bytes := cp.St.Snapshot()
	rep.Copied, rep.Bytes = keys, bytes
	rep.Chunked = cp.St.Chunked
	rep.Longest = cp.St.RoundTrips()
	if tr != nil {
		rep.Events, rep.Restarts = tr.Counts()
		rep.Tracking = tr.Source()
	}
	cp.St.Mu.Lock()
	rep.Patched = cp.St.Patched
	cp.St.Mu.Unlock()
}

// release gives a held queue back to its source (at a new epoch) and puts
// the record back at step copying (a --hold-copy move, which copies only
// under its hold, is dropped instead: its record is deleted), then
// confirms that on the source's replicas. Not confirmed, the queue is
// served by the source's primary, but a failover of the source may bring
// the hold back (with the record at its step before): the error says so,
// and the mover stops (--resume releases again, --abort drops the move).
// The release is fenced: written only while the record is the mover's, at
// step held, and the queue's entry older than the release's.
func (m *Mover) release(ctx context.Context, src *table.Node, rec *record) error {
	ctx = context.WithoutCancel(ctx)
	top, err := m.maxEpoch(ctx)
	if err != nil {
		return fmt.Errorf("releasing %s on %s: %v", m.Queue, src.Name, err)
	}
	ep := top + 1
	c := src.C
	err = m.fenced(ctx, src, own(rec, StepHeld), &table.Entry{Epoch: ep, State: table.Owned, Owner: rec.from}, func() valkey.Commands {
		if rec.holdCopy {
			return deleteRecordCmds(c, m.Queue)
		}
		return valkey.Commands{c.B().Hset().Key(table.MoveKey(m.Queue)).FieldValue().FieldValue("step", StepCopying).FieldValue("epoch", "0").Build()}
	})
	if errors.Is(err, ErrSuperseded) {
		return err
	}
	if err != nil {
		return fmt.Errorf("releasing %s on %s: %v", m.Queue, src.Name, err)
	}
	rec.step, rec.epoch = StepCopying, 0
	if err := src.Confirm(ctx); err != nil {
		return fmt.Errorf("releasing %s on %s: %v (%s's primary serves the queue, but a failover of %s before its replicas have the release brings the hold back: "+
			"queue status shows it; --resume or --abort then)", m.Queue, src.Name, err, src.Name, src.Name)
	}
	return nil
}

// checkRecord stops the mover when its record is gone (aborted elsewhere)
// or no longer its own (taken over by --resume or --abort): a read, for the
// copy's rounds to stop early; the writes are fenced on their own.
func (m *Mover) checkRecord(ctx context.Context, src *table.Node, rec *record) error {
	cur, err := src.C.Do(ctx, src.C.B().Hgetall().Key(table.MoveKey(m.Queue)).Build()).AsStrMap()
	if err != nil {
		return fmt.Errorf("%w: reading the move record on %s: %v", table.ErrMove, src.Name, err)
	}
	if why := own(rec).check(cur); why != "" {
		return &supersededError{queue: m.Queue, node: src.Name, why: why}
	}
	return nil
}

// sortedCap sorts names and keeps the first n (with a note of the rest).
func sortedCap(names []string, n int) []string {
	out := slices.Sorted(slices.Values(names))
	if len(out) > n {
		more := len(out) - n
		out = append(out[:n], fmt.Sprintf("(and %d more)", more))
	}
	return out
}
