package keycopy

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// TmpSuffix names the key a chunked copy builds on the target before it
// is renamed into place; it keeps the key's hashtag (and slot).
const TmpSuffix = "~emqproxy-move"

// stringChunk is the number of bytes one GETRANGE of a chunked string
// copy reads.
const stringChunk = 64 << 10

// LargeResult is what a large key's copy or comparison did.
type LargeResult struct {
	typ     string
	Copied  bool // rebuilt on the target in chunks
	Diffs   int  // elements that differed (patched), or 1 when rebuilt after a difference
	written int  // bytes written
}

// SyncLarge brings one large key of the source onto the target: a chunked
// copy when the target does not have it from this copy yet, else a
// comparison that patches what differs (a sorted set element by element;
// a hash or set field by field, rebuilt when the target has extra ones; a
// list or string rebuilt when anything differs). Types that cannot be
// chunked (streams, module types) are copied with one DUMP/RESTORE.
//
// rebuild copies in chunks even a key the target has: while the source is
// served and its changes come member by member, that copy is a base for
// the patches that follow (patch.go), which a comparison is not.
func (c *Copier) SyncLarge(ctx context.Context, k string, throttle, rebuild bool) (LargeResult, error) {
	typ, err := c.St.do1(ctx, c.Src, c.Src.C.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return LargeResult{}, fmt.Errorf("%w: TYPE %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
	}
	res := LargeResult{typ: typ}
	c.Mu.Lock()
	onDst := c.bigDst[k]
	c.Mu.Unlock()
	switch {
	case typ == "none":
		_, err = c.writeSmall(ctx, []dumped{{key: k, gone: true}})
		return res, err
	case typ != "zset" && typ != "hash" && typ != "set" && typ != "list" && typ != "string":
		ds, _, _, err := c.readRound(ctx, []string{k}, nil)
		if err != nil {
			return res, err
		}
		n, err := c.writeSmall(ctx, ds)
		res.written = n
		return res, err
	case !onDst || rebuild:
		res.Copied = true
		res.written, err = c.chunkCopy(ctx, k, typ, throttle)
		return res, err
	}
	c.SetBased(k, false)
	switch typ {
	case "zset":
		res.Diffs, res.written, err = c.zsync(ctx, k, throttle)
	case "hash", "set":
		res.Diffs, res.written, err = c.fieldSync(ctx, k, typ, throttle)
	default:
		var same bool
		same, err = c.sameSequence(ctx, k, typ)
		if err == nil && !same {
			res.Diffs, res.Copied = 1, true
			res.written, err = c.chunkCopy(ctx, k, typ, throttle)
		}
	}
	return res, err
}

// chunkCopy builds k on the target in chunks under a temporary name (the
// source's remaining TTL set on it) and renames it into place, unlinking
// the target's old value first (UNLINK frees a large value off the main
// thread; RENAME over it would free it inline).
func (c *Copier) chunkCopy(ctx context.Context, k, typ string, throttle bool) (int, error) {
	tmp := k + TmpSuffix
	s, d := c.Src.C.B(), c.Dst.C.B()
	if c.Tr != nil {
		// What changed before the copy begins is in the copy: only the
		// changes from now on are patched after it (patch.go).
		c.Tr.Forget(k)
	}
	if err := c.St.do1(ctx, c.Dst, d.Unlink().Key(tmp).Build()).Error(); err != nil {
		return 0, fmt.Errorf("%w: UNLINK %s on %s: %v", table.ErrMove, tmp, c.Dst.Name, err)
	}
	written := 0
	// write writes n bytes of the key; put paces them too (--rate is
	// taken as they are written, or, for what is gathered before it is
	// written, as it is read).
	write := func(n int, cmds ...valkey.Completed) error {
		for _, r := range c.St.do(ctx, c.Dst, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("%w: copying %s in chunks to %s: %v", table.ErrMove, k, c.Dst.Name, err)
			}
		}
		written += n
		c.St.add(0, n)
		return nil
	}
	put := func(n int, cmds ...valkey.Completed) error {
		if err := write(n, cmds...); err != nil || !throttle {
			return err
		}
		return c.Lim.wait(ctx, n)
	}
	get := func(cmd valkey.Completed) (valkey.ValkeyResult, error) {
		r := c.St.do1(ctx, c.Src, cmd)
		if err := r.Error(); err != nil {
			return r, fmt.Errorf("%w: reading %s in chunks on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		return r, nil
	}
	var err error
	switch typ {
	case "zset", "hash", "set":
		// A scan, not ranks: it returns every element present for its
		// whole length while the key is written (patch.go). The scan runs
		// ahead of the writes, which go zdepth chunks a round trip.
		sctx, cancel := context.WithCancel(ctx)
		pages, scanErr := c.scanPages(sctx, c.Src, k, typ)
		// A sorted set's elements are gathered and written in descending
		// order (zsorted), zsortBytes of memory at a time.
		var sorted zsorted
		var cmds valkey.Commands
		n := 0
		for els := range pages {
			if err != nil {
				continue
			}
			if typ == "zset" {
				read, aerr := sorted.add(els)
				if aerr != nil {
					err = fmt.Errorf("%w: ZSCAN %s on %s: %v", table.ErrMove, k, c.Src.Name, aerr)
					cancel()
					continue
				}
				c.St.addRead(read)
				if throttle {
					err = c.Lim.wait(ctx, read)
				}
				if err == nil && sorted.mem > c.zsortBytes {
					err = c.putSorted(&sorted, tmp, write)
				}
				if err != nil {
					cancel()
				}
				continue
			}
			for _, el := range els {
				n += len(el)
			}
			switch typ {
			case "hash":
				cmd := d.Hset().Key(tmp).FieldValue()
				for i := 0; i+1 < len(els); i += 2 {
					cmd = cmd.FieldValue(els[i], els[i+1])
				}
				cmds = append(cmds, cmd.Build())
			default:
				cmds = append(cmds, d.Sadd().Key(tmp).Member(els...).Build())
			}
			if err == nil && len(cmds) == zdepth {
				err = put(n, cmds...)
				cmds, n = nil, 0
			}
			if err != nil {
				cancel()
			}
		}
		if err == nil && len(sorted.els) > 0 {
			err = c.putSorted(&sorted, tmp, write)
		}
		if err == nil && len(cmds) > 0 {
			err = put(n, cmds...)
		}
		cancel()
		if serr := scanErr(); err == nil && serr != nil {
			err = serr
		}
	case "list":
		for lo := int64(0); ; lo += int64(c.chunk) {
			var r valkey.ValkeyResult
			if r, err = get(s.Lrange().Key(k).Start(lo).Stop(lo + int64(c.chunk) - 1).Build()); err != nil {
				break
			}
			els, err2 := r.AsStrSlice()
			if err2 != nil {
				err = err2
				break
			}
			if len(els) > 0 {
				n := 0
				for _, el := range els {
					n += len(el)
				}
				if err = put(n, d.Rpush().Key(tmp).Element(els...).Build()); err != nil {
					break
				}
			}
			if len(els) < c.chunk {
				break
			}
		}
	case "string":
		for lo := int64(0); ; lo += stringChunk {
			var r valkey.ValkeyResult
			if r, err = get(s.Getrange().Key(k).Start(lo).End(lo + stringChunk - 1).Build()); err != nil {
				break
			}
			part, err2 := r.ToString()
			if err2 != nil {
				err = err2
				break
			}
			if len(part) > 0 {
				if err = put(len(part), d.Append().Key(tmp).Value(part).Build()); err != nil {
					break
				}
			}
			if len(part) < stringChunk {
				break
			}
		}
	}
	if err != nil {
		return written, err
	}
	ttl, err := c.St.do1(ctx, c.Src, s.Pttl().Key(k).Build()).AsInt64()
	if err != nil {
		return written, fmt.Errorf("%w: PTTL %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
	}
	if written == 0 || ttl == -2 {
		// Gone (or emptied) on the source while it was read.
		_, err := c.writeSmall(ctx, []dumped{{key: k, gone: true}})
		_ = c.St.do1(ctx, c.Dst, d.Unlink().Key(tmp).Build()).Error()
		return written, err
	}
	cmds := valkey.Commands{d.Multi().Build()}
	if ttl > 0 {
		cmds = append(cmds, d.Pexpire().Key(tmp).Milliseconds(ttl).Build())
	}
	cmds = append(cmds, d.Unlink().Key(k).Build(), d.Rename().Key(tmp).Newkey(k).Build(), d.Exec().Build())
	rs := c.St.do(ctx, c.Dst, cmds...)
	for _, r := range rs {
		if err := r.Error(); err != nil {
			return written, fmt.Errorf("%w: renaming %s into place on %s: %v", table.ErrMove, tmp, c.Dst.Name, err)
		}
	}
	arr, err := rs[len(rs)-1].ToArray()
	if err != nil {
		return written, fmt.Errorf("%w: renaming %s into place on %s: %v", table.ErrMove, tmp, c.Dst.Name, err)
	}
	for _, r := range arr {
		if err := r.Error(); err != nil {
			return written, fmt.Errorf("%w: renaming %s into place on %s: %v", table.ErrMove, tmp, c.Dst.Name, err)
		}
	}
	existed, _ := arr[len(arr)-2].AsInt64()
	c.present(k, existed == 1, true)
	c.Mu.Lock()
	c.bigDst[k] = true
	c.base[k] = true
	c.Mu.Unlock()
	c.St.Mu.Lock()
	c.St.keys++
	c.St.Chunked++
	c.St.Mu.Unlock()
	return written, nil
}

// zsortBytes bounds the memory a chunked copy gives one sorted set's
// elements, gathered to be written in order: about a million elements of
// short ids (LargeParallel sets are copied at once). A larger set is
// written in sorted runs of that size. Copier.zsortBytes is
// this but in tests.
const zsortBytes = 32 << 20

// zelemBytes is what an element costs a zsorted beyond its member's bytes
// (the ZScore, and the slice's room to grow).
const zelemBytes = 40

// zsorted is a sorted set's elements gathered from a scan, and the memory
// they take here.
type zsorted struct {
	els []valkey.ZScore
	mem int
}

// add takes one page of a ZSCAN (member, score pairs) and returns the
// bytes it read.
func (z *zsorted) add(els []string) (int, error) {
	read := 0
	for i := 0; i+1 < len(els); i += 2 {
		f, err := strconv.ParseFloat(els[i+1], 64)
		if err != nil {
			return read, fmt.Errorf("score %q: %v", els[i+1], err)
		}
		z.els = append(z.els, valkey.ZScore{Member: els[i], Score: f})
		read += len(els[i]) + len(els[i+1])
		z.mem += len(els[i]) + zelemBytes
	}
	return read, nil
}

// putSorted writes the gathered elements highest first, zdepth chunks a
// round trip, with write (unpaced: they were paced as they were read), and
// empties z for the next run (its room kept). A
// skiplist insert walks from the lowest element: one below every element
// the key holds is placed at once, where one in scan order
// (the hash table's) walks and compares its way in, member by member for
// tied scores (every pending id has score 0). On a 250k-member set this
// takes the target's part of the copy from about half of its processor
// time to a small share.
func (c *Copier) putSorted(z *zsorted, tmp string, put func(int, ...valkey.Completed) error) error {
	defer func() {
		clear(z.els)
		z.els, z.mem = z.els[:0], 0
	}()
	slices.SortFunc(z.els, func(a, b valkey.ZScore) int { return zcmp(&b, &a) })
	d := c.Dst.C.B()
	var cmds valkey.Commands
	n := 0
	for lo := 0; lo < len(z.els); lo += c.chunk {
		cmd := d.Zadd().Key(tmp).ScoreMember()
		for _, e := range z.els[lo:min(lo+c.chunk, len(z.els))] {
			cmd = cmd.ScoreMember(e.Score, e.Member)
			n += len(e.Member) + 8
		}
		cmds = append(cmds, cmd.Build())
		if len(cmds) == zdepth {
			if err := put(n, cmds...); err != nil {
				return err
			}
			cmds, n = nil, 0
		}
	}
	if len(cmds) > 0 {
		return put(n, cmds...)
	}
	return nil
}

// scanPages scans a sorted set (ZSCAN: member, score pairs), hash (HSCAN:
// field, value pairs) or set (SSCAN) of n, c.chunk elements a command,
// ahead of its consumer. The channel closes at the end of the scan, or when
// ctx ends; then the function returns the scan's error.
func (c *Copier) scanPages(ctx context.Context, n *table.Node, k, typ string) (<-chan []string, func() error) {
	pages := make(chan []string, zdepth)
	var err error
	go func() {
		defer close(pages)
		b := n.C.B()
		var cursor uint64
		for {
			var cmd valkey.Completed
			switch typ {
			case "zset":
				cmd = b.Zscan().Key(k).Cursor(cursor).Count(int64(c.chunk)).Build()
			case "hash":
				cmd = b.Hscan().Key(k).Cursor(cursor).Count(int64(c.chunk)).Build()
			default:
				cmd = b.Sscan().Key(k).Cursor(cursor).Count(int64(c.chunk)).Build()
			}
			e, rerr := c.St.do1(ctx, n, cmd).AsScanEntry()
			if rerr != nil {
				if ctx.Err() == nil {
					err = fmt.Errorf("%w: scanning %s on %s: %v", table.ErrMove, k, n.Name, rerr)
				}
				return
			}
			if len(e.Elements) > 0 {
				select {
				case pages <- e.Elements:
				case <-ctx.Done():
					return
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				return
			}
		}
	}()
	return pages, func() error {
		for range pages {
		}
		return err
	}
}

// fieldSync compares a hash (field by field, HSCAN on the source, HMGET on
// the target) or a set (SSCAN, SMISMEMBER) and patches the target; when the
// target then has more fields or members than the source, it is rebuilt.
func (c *Copier) fieldSync(ctx context.Context, k, typ string, throttle bool) (diffs, written int, err error) {
	s, d := c.Src.C.B(), c.Dst.C.B()
	var cursor uint64
	for {
		var cmd valkey.Completed
		if typ == "hash" {
			cmd = s.Hscan().Key(k).Cursor(cursor).Count(int64(c.chunk)).Build()
		} else {
			cmd = s.Sscan().Key(k).Cursor(cursor).Count(int64(c.chunk)).Build()
		}
		e, err := c.St.do1(ctx, c.Src, cmd).AsScanEntry()
		if err != nil {
			return diffs, written, fmt.Errorf("%w: scanning %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		if len(e.Elements) > 0 {
			read := 0
			for _, el := range e.Elements {
				read += len(el)
			}
			c.St.addRead(read)
			n, w, err := c.fieldPatch(ctx, k, typ, e.Elements)
			if err != nil {
				return diffs, written, err
			}
			diffs += n
			written += w
			if throttle {
				if err := c.Lim.wait(ctx, w); err != nil {
					return diffs, written, err
				}
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	var a, b valkey.Completed
	if typ == "hash" {
		a, b = s.Hlen().Key(k).Build(), d.Hlen().Key(k).Build()
	} else {
		a, b = s.Scard().Key(k).Build(), d.Scard().Key(k).Build()
	}
	na, err1 := c.St.do1(ctx, c.Src, a).AsInt64()
	nb, err2 := c.St.do1(ctx, c.Dst, b).AsInt64()
	if err1 != nil || err2 != nil {
		return diffs, written, fmt.Errorf("%w: counting %s: %v %v", table.ErrMove, k, err1, err2)
	}
	if nb != na {
		w, err := c.chunkCopy(ctx, k, typ, throttle)
		return diffs + 1, written + w, err
	}
	if err := c.syncTTL(ctx, k); err != nil {
		return diffs, written, err
	}
	c.St.add(0, written)
	return diffs, written, nil
}

// fieldPatch checks one page of a hash's fields (field, value pairs) or a
// set's members on the target and writes the ones that differ.
func (c *Copier) fieldPatch(ctx context.Context, k, typ string, els []string) (diffs, written int, err error) {
	d := c.Dst.C.B()
	if typ == "hash" {
		var fields []string
		for i := 0; i+1 < len(els); i += 2 {
			fields = append(fields, els[i])
		}
		vals, err := c.St.do1(ctx, c.Dst, d.Hmget().Key(k).Field(fields...).Build()).ToArray()
		if err != nil {
			return 0, 0, fmt.Errorf("%w: HMGET %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
		cmd := d.Hset().Key(k).FieldValue()
		for i, v := range vals {
			got, err := v.ToString()
			if err != nil || got != els[2*i+1] {
				cmd = cmd.FieldValue(els[2*i], els[2*i+1])
				diffs++
				written += len(els[2*i]) + len(els[2*i+1])
			}
		}
		if diffs > 0 {
			if err := c.St.do1(ctx, c.Dst, cmd.Build()).Error(); err != nil {
				return diffs, written, fmt.Errorf("%w: HSET %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
			}
		}
		return diffs, written, nil
	}
	in, err := c.St.do1(ctx, c.Dst, d.Smismember().Key(k).Member(els...).Build()).ToArray()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: SMISMEMBER %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
	}
	var missing []string
	for i, v := range in {
		if n, _ := v.AsInt64(); n == 0 {
			missing = append(missing, els[i])
			written += len(els[i])
		}
	}
	if len(missing) > 0 {
		if err := c.St.do1(ctx, c.Dst, d.Sadd().Key(k).Member(missing...).Build()).Error(); err != nil {
			return 0, 0, fmt.Errorf("%w: SADD %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
	}
	return len(missing), written, nil
}

// sameSequence compares a list (LRANGE) or a string (GETRANGE) chunk by
// chunk on both nodes.
func (c *Copier) sameSequence(ctx context.Context, k, typ string) (bool, error) {
	s, d := c.Src.C.B(), c.Dst.C.B()
	for lo := int64(0); ; {
		var a, b valkey.Completed
		step := int64(c.chunk)
		if typ == "list" {
			a, b = s.Lrange().Key(k).Start(lo).Stop(lo+step-1).Build(), d.Lrange().Key(k).Start(lo).Stop(lo+step-1).Build()
		} else {
			step = stringChunk
			a, b = s.Getrange().Key(k).Start(lo).End(lo+step-1).Build(), d.Getrange().Key(k).Start(lo).End(lo+step-1).Build()
		}
		ra, rb := c.St.do1(ctx, c.Src, a), c.St.do1(ctx, c.Dst, b)
		if err := ra.Error(); err != nil {
			return false, fmt.Errorf("%w: reading %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		if err := rb.Error(); err != nil {
			return false, nil // another type on the target: rebuild it
		}
		var na int
		if typ == "list" {
			xa, _ := ra.AsStrSlice()
			xb, _ := rb.AsStrSlice()
			if len(xa) != len(xb) {
				return false, nil
			}
			for i := range xa {
				if xa[i] != xb[i] {
					return false, nil
				}
			}
			na = len(xa)
		} else {
			xa, _ := ra.ToString()
			xb, _ := rb.ToString()
			if xa != xb {
				return false, nil
			}
			na = len(xa)
		}
		if int64(na) < step {
			return true, c.syncTTL(ctx, k)
		}
		lo += step
	}
}

// syncTTL gives the target's key the source's remaining TTL (or none).
func (c *Copier) syncTTL(ctx context.Context, k string) error {
	ttl, err := c.St.do1(ctx, c.Src, c.Src.C.B().Pttl().Key(k).Build()).AsInt64()
	if err != nil {
		return fmt.Errorf("%w: PTTL %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
	}
	d := c.Dst.C.B()
	var cmd valkey.Completed
	switch {
	case ttl > 0:
		cmd = d.Pexpire().Key(k).Milliseconds(ttl).Build()
	case ttl == -1:
		cmd = d.Persist().Key(k).Build()
	default:
		return nil
	}
	if err := c.St.do1(ctx, c.Dst, cmd).Error(); err != nil {
		return fmt.Errorf("%w: setting the TTL of %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
	}
	return nil
}
