package control

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
	// batchBytes bounds the DUMP payloads of one round trip.
	batchBytes = 1 << 20
)

// copier copies keys of one queue from src to dst and verifies them.
type copier struct {
	src, dst   *Node
	queue      string
	prefix     string // "emq:{q}:"
	lim        *limiter
	st         *copyStats
	large      int64 // MEMORY USAGE past which a key is copied in chunks (0: never)
	chunk      int
	tr         *tracker // the source's tracker (nil when copying under the hold only)
	inv        *inventory
	mu         sync.Mutex
	bigDst     map[string]bool // keys copied in chunks: large on the target
	base       map[string]bool // large keys whose copy is a base for member patches (patch.go)
	unverified []string        // keys copied in chunks, not compared yet
	lastSync   map[string]time.Duration
	doing      string // the large key being copied, compared or verified, for the progress line
}

// busy names the large key the copy works on (what its progress line
// shows while no key is written: a comparison or a verification reads);
// the function returned clears it.
func (c *copier) busy(what string) func() {
	c.mu.Lock()
	c.doing = what
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.doing == what {
			c.doing = ""
		}
		c.mu.Unlock()
	}
}

// working is what busy named ("" when no large key is being worked on).
func (c *copier) working() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.doing
}

func newCopier(src, dst *Node, queue string, rate, large int64, chunk int, tr *tracker) *copier {
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	return &copier{src: src, dst: dst, queue: queue, prefix: "emq:{" + queue + "}:", lim: newLimiter(rate),
		st: newCopyStats(), large: large, chunk: chunk, tr: tr, inv: newInventory(), bigDst: map[string]bool{}, base: map[string]bool{}, lastSync: map[string]time.Duration{}}
}

// inventory counts the queue's keys on the target as the copy writes and
// deletes them: the report's counts without a scan under the hold.
type inventory struct {
	mu    sync.Mutex
	keys  int64
	rows  int64
	other map[string]bool
}

func newInventory() *inventory { return &inventory{other: map[string]bool{}} }

// kind classifies a key of the queue: a job row, a job-core set or flag, or
// another key under the hashtag.
func (c *copier) kind(k string) string {
	suf := strings.TrimPrefix(k, c.prefix)
	switch {
	case strings.HasPrefix(suf, "job:"):
		return "row"
	case slices.Contains(jobCore, suf):
		return "core"
	}
	return "other"
}

// present records that k exists on the target now (existed: it did before).
func (c *copier) present(k string, existed, exists bool) {
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
	c.inv.mu.Lock()
	defer c.inv.mu.Unlock()
	c.inv.keys += d
	switch c.kind(k) {
	case "row":
		c.inv.rows += d
	case "other":
		if d > 0 {
			c.inv.other[k] = true
		} else {
			delete(c.inv.other, k)
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

// copyKeys copies keys (small ones pipelined: DUMP and PTTL on the source,
// UNLINK, RESTORE and DUMP on the target) and returns the large ones, left
// for syncLarge. Each restored key is verified: its DUMP on the target
// equals the payload read from the source.
func (c *copier) copyKeys(ctx context.Context, keys []string, throttle bool) ([]string, error) {
	pages := make(chan []string, 1)
	pages <- keys
	close(pages)
	return c.copyStream(ctx, pages, throttle)
}

// copyStream is copyKeys for keys arriving in pages (a scan). The source's
// round trips carry the DUMP and PTTL of one batch with the MEMORY USAGE
// of the next, and run ahead of the target's.
func (c *copier) copyStream(ctx context.Context, pages <-chan []string, throttle bool) ([]string, error) {
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
		n, err := c.writeSmall(ctx, b)
		if err != nil {
			writeErr = err
			cancel()
			continue
		}
		if throttle {
			if err := c.lim.wait(ctx, n); err != nil {
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
func (c *copier) readRound(ctx context.Context, dump, probe []string) (out []dumped, small, large []string, err error) {
	b := c.src.C.B()
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
	res := c.st.do(ctx, c.src, cmds...)
	for i, k := range dump {
		p, err := res[2*i].ToString()
		if valkey.IsValkeyNil(err) {
			out = append(out, dumped{key: k, gone: true})
			continue
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: DUMP %s on %s: %v", ErrMove, k, c.src.Name, err)
		}
		ttl, err := res[2*i+1].AsInt64()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: PTTL %s on %s: %v", ErrMove, k, c.src.Name, err)
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
				return nil, nil, nil, fmt.Errorf("%w: MEMORY USAGE %s on %s: %v", ErrMove, probe[i], c.src.Name, err)
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
// unlinked; the others replaced) and verifies it. It returns the bytes
// written.
func (c *copier) writeSmall(ctx context.Context, b []dumped) (int, error) {
	for lo := 0; lo < len(b); {
		hi, size := lo, 0
		for hi < len(b) && (hi == lo || size+len(b[hi].payload) <= batchBytes) {
			size += len(b[hi].payload)
			hi++
		}
		if err := c.writePart(ctx, b[lo:hi]); err != nil {
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

func (c *copier) writePart(ctx context.Context, b []dumped) error {
	cmds := make(valkey.Commands, 0, 3*len(b))
	for _, d := range b {
		cmds = append(cmds, c.dst.C.B().Unlink().Key(d.key).Build())
		if !d.gone {
			cmds = append(cmds, c.dst.C.B().Restore().Key(d.key).Ttl(d.ttl).SerializedValue(d.payload).Build(),
				c.dst.C.B().Dump().Key(d.key).Build())
		}
	}
	res := c.st.do(ctx, c.dst, cmds...)
	i, keys, bytes := 0, 0, 0
	var deleted int64
	for _, d := range b {
		existed, err := res[i].AsInt64()
		if err != nil {
			return fmt.Errorf("%w: UNLINK %s on %s: %v", ErrMove, d.key, c.dst.Name, err)
		}
		i++
		c.mu.Lock()
		delete(c.bigDst, d.key)
		c.mu.Unlock()
		if d.gone {
			c.present(d.key, existed == 1, false)
			deleted += existed
			continue
		}
		if err := res[i].Error(); err != nil {
			return fmt.Errorf("%w: RESTORE %s on %s: %v", ErrMove, d.key, c.dst.Name, err)
		}
		c.present(d.key, existed == 1, true)
		got, err := res[i+1].ToString()
		if err != nil {
			return fmt.Errorf("%w: verifying %s on %s: %v", ErrMove, d.key, c.dst.Name, err)
		}
		i += 2
		if !samePayload(got, d.payload) {
			if err := c.verifyContent(ctx, d.key); err != nil {
				return err
			}
		}
		keys++
		bytes += len(d.payload)
	}
	c.st.add(keys, bytes)
	c.st.mu.Lock()
	c.st.deleted += deleted
	c.st.mu.Unlock()
	return nil
}

// isLarge reports whether k was copied in chunks (it is large on the
// target).
func (c *copier) isLarge(k string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bigDst[k]
}

// largeKeys are the keys copied in chunks.
func (c *copier) largeKeys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.bigDst))
}

// holdPlan is the estimate of the work a hold would do now, from what the
// copy measured so far: the changed small keys at the rate the target took
// the changes while served, and the large keys that changed whole at how
// long each took to compare under a previous hold.
type holdPlan struct {
	small     int           // changed small keys waiting
	rate      float64       // changed small keys copied per second, unpaced, while served (0: not measured)
	smallTime time.Duration // their copy at rate
	large     time.Duration // the large keys' comparisons, largeParallel at once (cutHold: a hold was cut before one was compared)
	largeKeys []string      // their names
}

// fits reports whether the hold's work fits within maxHold: the large keys'
// comparisons, and twice the small keys' copy (the changes made while the
// proxies acknowledge the hold join the tail, and each pass under the hold
// settles the tracking first).
func (p holdPlan) fits(maxHold time.Duration) bool {
	if p.large >= cutHold || p.large > maxHold || p.smallTime >= cutHold/4 {
		return false
	}
	return p.large+2*p.smallTime <= maxHold
}

// work says what the hold would do, for the mover's output.
func (p holdPlan) work() string {
	var s string
	switch {
	case p.small == 0:
		s = "no changed small key left"
	case p.smallTime >= cutHold/4:
		s = fmt.Sprintf("%d changed keys, at a rate not measured yet", p.small)
	case p.rate == 0:
		s = fmt.Sprintf("%d changed keys to copy in about %v (at the copy's rate so far)", p.small, p.smallTime.Round(time.Millisecond))
	default:
		s = fmt.Sprintf("%d changed keys to copy in about %v at %.0f keys/s", p.small, p.smallTime.Round(time.Millisecond), p.rate)
	}
	switch {
	case len(p.largeKeys) == 0:
	case p.large >= cutHold:
		s += fmt.Sprintf(", and %d large keys to compare whole (one was cut by a previous hold)", len(p.largeKeys))
	default:
		s += fmt.Sprintf(", and %d large keys to compare whole in about %v", len(p.largeKeys), p.large.Round(time.Millisecond))
	}
	return s
}

// smallOver reports whether the small keys alone keep the hold from
// fitting (else it is the large keys).
func (p holdPlan) smallOver(maxHold time.Duration) bool {
	return p.large < cutHold && p.large <= maxHold && !p.fits(maxHold)
}

// holdEstimate plans the hold for small changed small keys: the large keys
// that changed since the last take (and cannot be patched member by
// member) take as long as each took last time (cutHold when a hold was
// released before one was compared), largeParallel at once; the small
// keys at the rate the copy took changed keys while served (before any is
// measured: the rate of the whole copy so far, paced, a lower bound).
func (c *copier) holdEstimate(tr *tracker, small int) holdPlan {
	c.mu.Lock()
	last := maps.Clone(c.lastSync)
	var big []string
	for k := range c.bigDst {
		big = append(big, k)
	}
	c.mu.Unlock()
	p := holdPlan{small: small, rate: c.st.tailRate()}
	rate := p.rate
	if rate == 0 {
		keys, _ := c.st.snapshot()
		rate = float64(keys) / max(time.Since(c.st.started).Seconds(), 1e-3)
	}
	switch {
	case small == 0:
	case rate <= 0:
		p.smallTime = cutHold
	default:
		p.smallTime = time.Duration(float64(small) / rate * float64(time.Second))
	}
	var sum, top time.Duration
	cut := false
	for _, k := range big {
		if ch, ok := tr.changeOf(k); !ok || c.patchable(k, ch) {
			continue // unchanged, or patched at the cost of its change
		}
		p.largeKeys = append(p.largeKeys, k)
		d := last[k]
		if d == cutHold {
			cut = true
			continue
		}
		sum += d
		top = max(top, d)
	}
	slices.Sort(p.largeKeys)
	p.large = max(top, sum/largeParallel)
	if cut {
		p.large = cutHold
	}
	return p
}

// samePayload compares two DUMP payloads without their trailers (the
// 2-byte RDB version and the 8-byte checksum): two servers of different
// versions write the same value with different trailers.
func samePayload(a, b string) bool {
	if len(a) < 10 || len(b) < 10 {
		return a == b
	}
	return a[:len(a)-10] == b[:len(b)-10]
}

// verifyContent compares a key's content on both nodes, for a restored key
// whose DUMP differs from the source's (the target stores it in another
// encoding). A difference is an error unless the key changed on the
// source since it was read (it is copied again).
func (c *copier) verifyContent(ctx context.Context, k string) error {
	a, err := c.content(ctx, c.src, k)
	if err != nil {
		return err
	}
	b, err := c.content(ctx, c.dst, k)
	if err != nil {
		return err
	}
	if a == b {
		return nil
	}
	if c.tr != nil {
		if err := c.tr.barrier(ctx); err != nil {
			return err
		}
		if c.tr.changed(k) {
			return nil
		}
	}
	return fmt.Errorf("%w: verifying %s on %s: its value differs from the source's", ErrMove, k, c.dst.Name)
}

// content is a small key's value in a canonical form (members of sets and
// fields of hashes sorted), read with one command.
func (c *copier) content(ctx context.Context, n *Node, k string) (string, error) {
	typ, err := n.C.Do(ctx, n.C.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("%w: TYPE %s on %s: %v", ErrMove, k, n.Name, err)
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
		return "", fmt.Errorf("%w: verifying %s on %s: a %s whose DUMP differs between the nodes cannot be compared", ErrMove, k, n.Name, typ)
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

// scanEach calls fn with each page of the queue's keys on n (SCAN MATCH,
// COUNT 1000), and with the fraction of the keyspace scanned so far.
func scanEach(ctx context.Context, n *Node, queue string, fn func(keys []string, frac float64) error) error {
	pattern := "emq:{" + rewrite.GlobEscape(queue) + "}:*"
	var cursor uint64
	for {
		e, err := n.C.Do(ctx, n.C.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return fmt.Errorf("%w: scanning %s: %v", ErrMove, n.Name, err)
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

// recountTarget counts the queue's keys on the target again (the
// inventory), after a copy whose writes were cut: a pipeline cut by the
// hold's deadline may have been applied without its replies read, so the
// inventory no longer knows which of its keys exist. Only the mover writes
// the queue's keys on the target, and nothing copies meanwhile: the count
// is exact. Temporary keys of chunked copies are not counted.
func (c *copier) recountTarget(ctx context.Context) error {
	keys, err := scanQueue(ctx, c.dst, c.queue, 0)
	if err != nil {
		return fmt.Errorf("%w: counting the copied keys on %s: %v", ErrMove, c.dst.Name, err)
	}
	inv := newInventory()
	for _, k := range keys {
		if strings.HasSuffix(k, tmpSuffix) {
			continue
		}
		inv.keys++
		switch c.kind(k) {
		case "row":
			inv.rows++
		case "other":
			inv.other[k] = true
		}
	}
	c.inv.mu.Lock()
	c.inv.keys, c.inv.rows, c.inv.other = inv.keys, inv.rows, inv.other
	c.inv.mu.Unlock()
	return nil
}

// wipeTarget deletes every key of the queue on the target (before a
// round that copies every key: left by a move that was stopped, an older
// copy, or a copy whose tracking was lost) and empties the inventory.
func (c *copier) wipeTarget(ctx context.Context) error {
	err := scanEach(ctx, c.dst, c.queue, func(keys []string, _ float64) error {
		if len(keys) == 0 {
			return nil
		}
		if err := c.st.do1(ctx, c.dst, c.dst.C.B().Unlink().Key(keys...).Build()).Error(); err != nil {
			return fmt.Errorf("%w: UNLINK on %s: %v", ErrMove, c.dst.Name, err)
		}
		return nil
	})
	c.mu.Lock()
	c.bigDst = map[string]bool{}
	c.mu.Unlock()
	c.inv = newInventory()
	return err
}
