package keycopy

import (
	"context"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/rewrite"
)

// Defaults of the copy.
const (
	// DefaultLargeKey is the size (MEMORY USAGE, bytes) past which a set,
	// sorted set, hash, list or string is copied in chunks instead of one
	// DUMP/RESTORE.
	DefaultLargeKey = 64 << 10
	// DefaultChunk is the number of elements one command of a chunked copy
	// reads or writes.
	DefaultChunk = 512
	// copyBatch is the number of small keys one round trip carries.
	copyBatch = 256
	// rowStreams is how many pipelines copy small keys at once (each a
	// round trip to the source ahead of one to the target): on one, the
	// copy waits out both nodes' latency, a busy node's most of all.
	rowStreams = 2
	// batchBytes bounds the DUMP payloads of one round trip.
	batchBytes = 1 << 20
	// CutHold marks a large key whose comparison the hold's deadline cut.
	CutHold = time.Duration(1<<63 - 1)
	// LargeParallel is how many large keys the hold copies at once.
	LargeParallel = 4
)

// Copier copies keys of one queue from src to dst and verifies them.
type Copier struct {
	Src, Dst   *table.Node
	queue      string
	prefix     string // "emq:{q}:"
	Lim        *limiter
	St         *copyStats
	large      int64 // MEMORY USAGE past which a key is copied in chunks (0: never)
	chunk      int
	zsortBytes int           // the memory a chunked copy gives a sorted set's elements, to write them in order
	Tr         *tail.Tracker // the source's tracker (nil when copying under the hold only)
	Inv        *inventory
	Mu         sync.Mutex
	bigDst     map[string]bool // keys copied in chunks: large on the target
	base       map[string]bool // large keys whose copy is a base for member patches (patch.go)
	Unverified []string        // keys copied in chunks, not compared yet
	LastSync   map[string]time.Duration
	doing      string // the large key being copied, compared or verified, for the progress line
	// rows are the connections small keys are copied on (CopyStream): Src
	// and Dst, or connections of their own (DialRows).
	rows struct {
		src, dst *table.Node
		owned    bool
	}
}

// DialRows gives the copy of small keys (CopyStream) connections of its
// own to both nodes, beside Src and Dst, which then carry the large keys'
// chunks, patches and verifications. A node answers one connection's
// commands in order: on one connection, a batch of rows sent behind the
// pipelines of a chunked copy waits for all of them, and the rows stall
// while the sets are copied. Close closes them.
func (c *Copier) DialRows() error {
	src, err := table.Dial(c.Src.Opts)
	if err != nil {
		return fmt.Errorf("%w: %v", table.ErrMove, err)
	}
	dst, err := table.Dial(c.Dst.Opts)
	if err != nil {
		src.Close()
		return fmt.Errorf("%w: %v", table.ErrMove, err)
	}
	src.Name, dst.Name = c.Src.Name, c.Dst.Name
	c.rows.src, c.rows.dst, c.rows.owned = src, dst, true
	return nil
}

// Close closes the connections DialRows opened.
func (c *Copier) Close() {
	if c.rows.owned {
		c.rows.src.Close()
		c.rows.dst.Close()
		c.rows.owned = false
		c.rows.src, c.rows.dst = c.Src, c.Dst
	}
}

// Busy names the large key the copy works on (what its progress line
// shows while no key is written: a comparison or a verification reads);
// the function returned clears it.
func (c *Copier) Busy(what string) func() {
	c.Mu.Lock()
	c.doing = what
	c.Mu.Unlock()
	return func() {
		c.Mu.Lock()
		if c.doing == what {
			c.doing = ""
		}
		c.Mu.Unlock()
	}
}

// working is what busy named ("" when no large key is being worked on).
func (c *Copier) working() string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.doing
}

func NewCopier(src, dst *table.Node, queue string, rate, large int64, chunk int, tr *tail.Tracker) *Copier {
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	c := &Copier{Src: src, Dst: dst, queue: queue, prefix: "emq:{" + queue + "}:", Lim: newLimiter(rate),
		St: newCopyStats(), large: large, chunk: chunk, zsortBytes: zsortBytes, Tr: tr, Inv: newInventory(), bigDst: map[string]bool{}, base: map[string]bool{}, LastSync: map[string]time.Duration{}}
	c.rows.src, c.rows.dst = src, dst
	return c
}

// inventory counts the queue's keys on the target as the copy writes and
// deletes them: the report's counts without a scan under the hold.
type inventory struct {
	Mu    sync.Mutex
	Keys  int64
	Rows  int64
	Other map[string]bool
	// Unsure: a round trip of UNLINKs and RESTOREs was sent again after
	// a lost connection (redo.go), so the counts may be off until the
	// next RecountTarget.
	Unsure bool
}

func newInventory() *inventory { return &inventory{Other: map[string]bool{}} }

// kind classifies a key of the queue: a job row, a job-core set or flag, or
// another key under the hashtag.
func (c *Copier) kind(k string) string {
	suf := strings.TrimPrefix(k, c.prefix)
	switch {
	case strings.HasPrefix(suf, "job:"):
		return "row"
	case slices.Contains(JobCore, suf):
		return "core"
	}
	return "other"
}

// IsRow reports whether k is a job row (a hash of a few fields: always
// small).
func (c *Copier) IsRow(k string) bool { return c.kind(k) == "row" }

// CoreKeys are the names of the queue's job-core keys (JobCore), whether
// or not they exist.
func (c *Copier) CoreKeys() []string {
	out := make([]string, len(JobCore))
	for i, s := range JobCore {
		out[i] = c.prefix + s
	}
	return out
}

// present records that k exists on the target now (existed: it did before).
func (c *Copier) present(k string, existed, exists bool) {
	d := int64(0)
	switch {
	case exists && !existed:
		d = 1
	case existed && !exists:
		d = -1
	}
	if d == 0 {
		return
	}
	c.Inv.Mu.Lock()
	defer c.Inv.Mu.Unlock()
	c.Inv.Keys += d
	switch c.kind(k) {
	case "row":
		c.Inv.Rows += d
	case "other":
		if d > 0 {
			c.Inv.Other[k] = true
		} else {
			delete(c.Inv.Other, k)
		}
	}
}

// dumped is one small key as read from the source.
type dumped struct {
	key     string
	payload string
	ttl     int64
	gone    bool
}

// CopyKeys copies keys (small ones pipelined: DUMP and PTTL on the source,
// UNLINK and RESTORE on the target) and returns the large ones, left for
// syncLarge. Each restored key is verified by RESTORE itself: it checks
// the payload's RDB version and CRC64 checksum, which DUMP wrote on the
// source over the value's bytes, before it writes anything, so a RESTORE
// that answers OK holds the source's value as it was read. (Reading the
// key back with DUMP, as the mover once did, found nothing that check
// does not, and cost a third of the copy's rate.)
func (c *Copier) CopyKeys(ctx context.Context, keys []string, throttle bool) ([]string, error) {
	pages := make(chan []string, (len(keys)+copyBatch-1)/copyBatch)
	for lo := 0; lo < len(keys); lo += copyBatch {
		pages <- keys[lo:min(lo+copyBatch, len(keys))]
	}
	close(pages)
	return c.CopyStream(ctx, pages, throttle, false)
}

// CopyStream is copyKeys for keys arriving in pages (a scan), on
// rowStreams pipelines at once. In each, the source's round trips carry
// the DUMP and PTTL of one batch with the MEMORY USAGE of the next, and
// run ahead of the target's.
//
// fresh: the target was wiped of the queue's keys for this copy (a full
// round), so a key is written with RESTORE alone, one command instead of
// UNLINK and RESTORE; one the target has after all (a scan may return a
// key twice) answers BUSYKEY and is written again the usual way.
//
// Two pipelines may write the same key (a scan's duplicate) out of the
// order they read it. The two reads differ only when a write came
// between them, which the tracking records: the key is copied again in
// the next round, as any key written during this one.
func (c *Copier) CopyStream(ctx context.Context, pages <-chan []string, throttle, fresh bool) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		large []string
		first error
		wg    sync.WaitGroup
	)
	for range rowStreams {
		wg.Go(func() {
			l, err := c.copyStream(ctx, pages, throttle, fresh)
			mu.Lock()
			large = append(large, l...)
			if first == nil {
				first = err
			}
			mu.Unlock()
			if err != nil {
				cancel() // the other pipelines' errors are this cancellation
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return large, nil
}

// copyStream is one pipeline of CopyStream.
func (c *Copier) copyStream(ctx context.Context, pages <-chan []string, throttle, fresh bool) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []dumped, 2)
	var large []string
	var readErr error
	go func() {
		defer close(batches)
		var next []string // probed small keys, dumped with the next probe
		step := func(probe []string) bool {
			out, small, big, err := c.readRound(ctx, next, probe)
			if err != nil {
				readErr = err
				return false
			}
			large = append(large, big...)
			next = small
			if len(out) == 0 {
				return true
			}
			select {
			case batches <- out:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for page := range pages {
			for lo := 0; lo < len(page); lo += copyBatch {
				if !step(page[lo:min(lo+copyBatch, len(page))]) {
					return
				}
			}
		}
		for len(next) > 0 {
			if !step(nil) {
				return
			}
		}
	}()
	var writeErr error
	for b := range batches {
		if writeErr != nil {
			continue
		}
		n, err := c.writeBatch(ctx, b, fresh)
		if err != nil {
			writeErr = err
			cancel()
			continue
		}
		if throttle {
			if err := c.Lim.wait(ctx, n); err != nil {
				writeErr = err
				cancel()
			}
		}
	}
	if writeErr != nil {
		return nil, writeErr
	}
	return large, readErr
}

// readRound is one round trip to the source: DUMP and PTTL of dump (keys
// known small), and MEMORY USAGE of probe. It returns what was dumped (keys
// gone from the source included), the probed keys that are small (to dump
// next) and the large ones. Without a size limit every probed key is small.
func (c *Copier) readRound(ctx context.Context, dump, probe []string) (out []dumped, small, large []string, err error) {
	b := c.rows.src.C.B()
	cmds := make(valkey.Commands, 0, 2*len(dump)+len(probe))
	for _, k := range dump {
		cmds = append(cmds, b.Dump().Key(k).Build(), b.Pttl().Key(k).Build())
	}
	if c.large > 0 {
		// A job row is a hash of a few fields (job-core.md): however large
		// its payload, no chunking would split it, so it is not probed.
		var probed []string
		for _, k := range probe {
			if c.kind(k) == "row" {
				small = append(small, k)
				continue
			}
			probed = append(probed, k)
			cmds = append(cmds, b.MemoryUsage().Key(k).Samples(1).Build())
		}
		probe = probed
	} else {
		small = probe
	}
	if len(cmds) == 0 {
		return nil, small, nil, nil
	}
	res := c.St.do(ctx, c.rows.src, cmds...)
	for i, k := range dump {
		p, err := res[2*i].ToString()
		if valkey.IsValkeyNil(err) {
			out = append(out, dumped{key: k, gone: true})
			continue
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: DUMP %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		ttl, err := res[2*i+1].AsInt64()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: PTTL %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		if ttl == -2 {
			out = append(out, dumped{key: k, gone: true})
			continue
		}
		out = append(out, dumped{key: k, payload: p, ttl: max(ttl, 0)})
	}
	if c.large > 0 {
		for i, r := range res[2*len(dump):] {
			sz, err := r.AsInt64()
			switch {
			case valkey.IsValkeyNil(err):
				out = append(out, dumped{key: probe[i], gone: true})
			case err != nil:
				return nil, nil, nil, fmt.Errorf("%w: MEMORY USAGE %s on %s: %v", table.ErrMove, probe[i], c.Src.Name, err)
			case sz > c.large:
				large = append(large, probe[i])
			default:
				small = append(small, probe[i])
			}
		}
	}
	return out, small, large, nil
}

// writeSmall writes one batch on the target (keys gone from the source are
// unlinked; the others replaced). It returns the bytes written.
func (c *Copier) writeSmall(ctx context.Context, b []dumped) (int, error) {
	return c.writeBatch(ctx, b, false)
}

// writeBatch is writeSmall; fresh: the target is not expected to have the
// keys (CopyStream).
func (c *Copier) writeBatch(ctx context.Context, b []dumped, fresh bool) (int, error) {
	for lo := 0; lo < len(b); {
		hi, size := lo, 0
		for hi < len(b) && (hi == lo || size+len(b[hi].payload) <= batchBytes) {
			size += len(b[hi].payload)
			hi++
		}
		busy, err := c.writePart(ctx, b[lo:hi], fresh)
		if err == nil && len(busy) > 0 {
			_, err = c.writePart(ctx, busy, false)
		}
		if err != nil {
			return 0, err
		}
		lo = hi
	}
	n := 0
	for _, d := range b {
		n += len(d.payload)
	}
	return n, nil
}

// writePart writes b on the target in one round trip: a key gone from
// the source is unlinked, another replaced (UNLINK, RESTORE), or, fresh,
// written with RESTORE alone. A fresh key the target has after all
// answers BUSYKEY and is returned in busy, to be written again not fresh.
func (c *Copier) writePart(ctx context.Context, b []dumped, fresh bool) (busy []dumped, err error) {
	if len(b) == 0 {
		return nil, nil
	}
	dst := c.rows.dst.C.B()
	cmds := make(valkey.Commands, 0, 2*len(b))
	for _, d := range b {
		if !fresh || d.gone {
			cmds = append(cmds, dst.Unlink().Key(d.key).Build())
		}
		if !d.gone {
			cmds = append(cmds, dst.Restore().Key(d.key).Ttl(d.ttl).SerializedValue(d.payload).Build())
		}
	}
	res, redone := c.St.send(ctx, c.rows.dst, cmds...)
	if redone {
		c.Inv.Mu.Lock()
		c.Inv.Unsure = true
		c.Inv.Mu.Unlock()
	}
	i, keys, bytes := 0, 0, 0
	var deleted int64
	for _, d := range b {
		var existed int64
		if !fresh || d.gone {
			if existed, err = res[i].AsInt64(); err != nil {
				return nil, fmt.Errorf("%w: UNLINK %s on %s: %v", table.ErrMove, d.key, c.Dst.Name, err)
			}
			i++
		}
		c.Mu.Lock()
		delete(c.bigDst, d.key)
		c.Mu.Unlock()
		if d.gone {
			c.present(d.key, existed == 1, false)
			deleted += existed
			continue
		}
		err := res[i].Error()
		i++
		if ve, ok := valkey.IsValkeyErr(err); ok && fresh && strings.HasPrefix(ve.Error(), "BUSYKEY") {
			busy = append(busy, d)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: RESTORE %s on %s: %v", table.ErrMove, d.key, c.Dst.Name, err)
		}
		c.present(d.key, existed == 1, true)
		keys++
		bytes += len(d.payload)
	}
	c.St.add(keys, bytes)
	c.St.Mu.Lock()
	c.St.deleted += deleted
	c.St.Mu.Unlock()
	return busy, nil
}

// IsLarge reports whether k was copied in chunks (it is large on the
// target).
func (c *Copier) IsLarge(k string) bool {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.bigDst[k]
}

// LargeKeys are the keys copied in chunks.
func (c *Copier) LargeKeys() []string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return slices.Sorted(maps.Keys(c.bigDst))
}

// holdPlan is the estimate of the work a hold would do now, from what the
// copy measured so far: the changed small keys at the rate the target took
// the changes while served, and the large keys that changed whole at how
// long each took to compare under a previous hold.
type holdPlan struct {
	small     int           // changed small keys waiting
	Rate      float64       // changed small keys copied per second, unpaced, while served (0: not measured)
	smallTime time.Duration // their copy at rate
	Large     time.Duration // the large keys' comparisons, largeParallel at once (cutHold: a hold was cut before one was compared)
	LargeKeys []string      // their names
}

// Fits reports whether the hold's work fits within maxHold: the large keys'
// comparisons, and twice the small keys' copy (the changes made while the
// proxies acknowledge the hold join the tail, and each pass under the hold
// settles the tracking first).
func (p holdPlan) Fits(maxHold time.Duration) bool {
	if p.Large >= CutHold || p.Large > maxHold || p.smallTime >= CutHold/4 {
		return false
	}
	return p.Large+2*p.smallTime <= maxHold
}

// Work says what the hold would do, for the mover's output.
func (p holdPlan) Work() string {
	var s string
	switch {
	case p.small == 0:
		s = "no changed small key left"
	case p.smallTime >= CutHold/4:
		s = fmt.Sprintf("%d changed keys, at a rate not measured yet", p.small)
	case p.Rate == 0:
		s = fmt.Sprintf("%d changed keys to copy in about %v (at the copy's rate so far)", p.small, p.smallTime.Round(time.Millisecond))
	default:
		s = fmt.Sprintf("%d changed keys to copy in about %v at %.0f keys/s", p.small, p.smallTime.Round(time.Millisecond), p.Rate)
	}
	switch {
	case len(p.LargeKeys) == 0:
	case p.Large >= CutHold:
		s += fmt.Sprintf(", and %d large keys to compare whole (one was cut by a previous hold)", len(p.LargeKeys))
	default:
		s += fmt.Sprintf(", and %d large keys to compare whole in about %v", len(p.LargeKeys), p.Large.Round(time.Millisecond))
	}
	return s
}

// SmallOver reports whether the small keys alone keep the hold from
// fitting (else it is the large keys).
func (p holdPlan) SmallOver(maxHold time.Duration) bool {
	return p.Large < CutHold && p.Large <= maxHold && !p.Fits(maxHold)
}

// HoldEstimate plans the hold for small changed small keys: the large keys
// that changed since the last take (and cannot be patched member by
// member) take as long as each took last time (cutHold when a hold was
// released before one was compared), largeParallel at once; the small
// keys at the rate the copy took changed keys while served (before any is
// measured: the rate of the whole copy so far, paced, a lower bound).
func (c *Copier) HoldEstimate(tr *tail.Tracker, small int) holdPlan {
	c.Mu.Lock()
	last := maps.Clone(c.LastSync)
	var big []string
	for k := range c.bigDst {
		big = append(big, k)
	}
	c.Mu.Unlock()
	p := holdPlan{small: small, Rate: c.St.tailRate()}
	rate := p.Rate
	if rate == 0 {
		keys, _ := c.St.Snapshot()
		rate = float64(keys) / max(time.Since(c.St.started).Seconds(), 1e-3)
	}
	switch {
	case small == 0:
	case rate <= 0:
		p.smallTime = CutHold
	default:
		p.smallTime = time.Duration(float64(small) / rate * float64(time.Second))
	}
	var sum, top time.Duration
	cut := false
	for _, k := range big {
		if ch, ok := tr.ChangeOf(k); !ok || c.Patchable(k, ch) {
			continue // unchanged, or patched at the cost of its change
		}
		p.LargeKeys = append(p.LargeKeys, k)
		d := last[k]
		if d == CutHold {
			cut = true
			continue
		}
		sum += d
		top = max(top, d)
	}
	slices.Sort(p.LargeKeys)
	p.Large = max(top, sum/LargeParallel)
	if cut {
		p.Large = CutHold
	}
	return p
}

// Content is a small key's value in a canonical form (members of sets and
// fields of hashes sorted), read with one command.
func Content(ctx context.Context, n *table.Node, k string) (string, error) {
	typ, err := n.C.Do(ctx, n.C.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("%w: TYPE %s on %s: %v", table.ErrMove, k, n.Name, err)
	}
	b := n.C.B()
	var cmd valkey.Completed
	switch typ {
	case "none":
		return "none", nil
	case "string":
		cmd = b.Get().Key(k).Build()
	case "hash":
		cmd = b.Hgetall().Key(k).Build()
	case "set":
		cmd = b.Smembers().Key(k).Build()
	case "zset":
		cmd = b.Zrange().Key(k).Min("0").Max("-1").Withscores().Build()
	case "list":
		cmd = b.Lrange().Key(k).Start(0).Stop(-1).Build()
	default:
		return "", fmt.Errorf("%w: verifying %s on %s: a %s whose DUMP differs between the nodes cannot be compared", table.ErrMove, k, n.Name, typ)
	}
	r := n.C.Do(ctx, cmd)
	switch typ {
	case "string":
		s, err := r.ToString()
		return "string " + s, err
	case "hash":
		m, err := r.AsStrMap()
		var lines []string
		for f, v := range m {
			lines = append(lines, strconv.Quote(f)+"="+strconv.Quote(v))
		}
		slices.Sort(lines)
		return "hash " + strings.Join(lines, ","), err
	case "zset":
		zs, err := r.AsZScores()
		var lines []string
		for _, z := range zs {
			lines = append(lines, strconv.Quote(z.Member)+"="+strconv.FormatFloat(z.Score, 'g', -1, 64))
		}
		return "zset " + strings.Join(lines, ","), err
	default:
		ss, err := r.AsStrSlice()
		if typ == "set" {
			slices.Sort(ss)
		}
		for i := range ss {
			ss[i] = strconv.Quote(ss[i])
		}
		return typ + " " + strings.Join(ss, ","), err
	}
}

// ScanEach calls fn with each page of the queue's keys on n (SCAN MATCH,
// COUNT 1000), and with the fraction of the keyspace scanned so far.
func ScanEach(ctx context.Context, n *table.Node, queue string, fn func(keys []string, frac float64) error) error {
	return scanEach(ctx, n, queue, n.C.Do, fn)
}

// ScanSource is ScanEach of the copy's source, its round trips sent again
// after a lost connection as the copy's are (redo.go).
func (c *Copier) ScanSource(ctx context.Context, fn func(keys []string, frac float64) error) error {
	return c.scan(ctx, c.Src, fn)
}

// scan is ScanEach of n (the copy's source or target) through the copy's
// round trips.
func (c *Copier) scan(ctx context.Context, n *table.Node, fn func(keys []string, frac float64) error) error {
	return scanEach(ctx, n, c.queue, func(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
		return c.St.do1(ctx, n, cmd)
	}, fn)
}

// scanEach is ScanEach with each SCAN sent by do.
func scanEach(ctx context.Context, n *table.Node, queue string, do func(context.Context, valkey.Completed) valkey.ValkeyResult, fn func(keys []string, frac float64) error) error {
	pattern := "emq:{" + rewrite.GlobEscape(queue) + "}:*"
	var cursor uint64
	for {
		e, err := do(ctx, n.C.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return fmt.Errorf("%w: scanning %s: %v", table.ErrMove, n.Name, err)
		}
		cursor = e.Cursor
		frac := 1.0
		if cursor != 0 {
			// SCAN walks the table in reverse binary order of the cursor:
			// reversed, the cursor is the part of the table behind it.
			frac = float64(bits.Reverse64(cursor)) / (1 << 64)
		}
		if len(e.Elements) > 0 || cursor == 0 {
			if err := fn(e.Elements, frac); err != nil {
				return err
			}
		}
		if cursor == 0 {
			return nil
		}
	}
}

// RecountTarget counts the queue's keys on the target again (the
// inventory), after a copy whose writes were cut: a pipeline cut by the
// hold's deadline may have been applied without its replies read, so the
// inventory no longer knows which of its keys exist. Only the mover writes
// the queue's keys on the target, and nothing copies meanwhile: the count
// is exact. Temporary keys of chunked copies are not counted.
func (c *Copier) RecountTarget(ctx context.Context) error {
	seen := map[string]bool{} // a scan may return a key twice
	err := c.scan(ctx, c.Dst, func(keys []string, _ float64) error {
		for _, k := range keys {
			seen[k] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("counting the copied keys: %w", err)
	}
	inv := newInventory()
	for k := range seen {
		if strings.HasSuffix(k, TmpSuffix) {
			continue
		}
		inv.Keys++
		switch c.kind(k) {
		case "row":
			inv.Rows++
		case "other":
			inv.Other[k] = true
		}
	}
	c.Inv.Mu.Lock()
	c.Inv.Keys, c.Inv.Rows, c.Inv.Other, c.Inv.Unsure = inv.Keys, inv.Rows, inv.Other, false
	c.Inv.Mu.Unlock()
	return nil
}

// WipeTarget deletes every key of the queue on the target (before a
// round that copies every key: left by a move that was stopped, an older
// copy, or a copy whose tracking was lost) and empties the inventory.
func (c *Copier) WipeTarget(ctx context.Context) error {
	err := c.scan(ctx, c.Dst, func(keys []string, _ float64) error {
		if len(keys) == 0 {
			return nil
		}
		if err := c.St.do1(ctx, c.Dst, c.Dst.C.B().Unlink().Key(keys...).Build()).Error(); err != nil {
			return fmt.Errorf("%w: UNLINK on %s: %v", table.ErrMove, c.Dst.Name, err)
		}
		return nil
	})
	c.Mu.Lock()
	c.bigDst = map[string]bool{}
	c.Mu.Unlock()
	c.Inv = newInventory()
	return err
}
