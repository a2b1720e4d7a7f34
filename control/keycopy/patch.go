package keycopy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"

	"github.com/valkey-io/valkey-go"
	"golang.org/x/sync/errgroup"
)

// verifyDepth is how many pages of a verification's scan are read on the
// target at once.
const verifyDepth = 4

// A large key's copy on the target is a base for member patches when every
// member that no recorded write touched since then has its source value on
// the target. A copy in chunks read with ZSCAN, HSCAN or SSCAN is one,
// whatever was written meanwhile: a scan returns every element present
// for its whole length, with its value, and the writes meanwhile are
// recorded from the moment before it began. A patch on a base is one
// again. A comparison in rank order while the source is written is not:
// elements shift between its reads.

// Based reports whether k's copy on the target is a base for patches.
func (c *Copier) Based(k string) bool {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.base[k]
}

func (c *Copier) SetBased(k string, ok bool) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if ok {
		c.base[k] = true
	} else {
		delete(c.base, k)
	}
}

// Patchable reports whether ch can be applied to k member by member.
func (c *Copier) Patchable(k string, ch *tail.Change) bool {
	return ch != nil && !ch.Whole && c.Based(k)
}

// Patch applies a change known member by member to a large key whose copy
// is a base: each member named, and for ZPOPMIN (ZPOPMAX) the target's
// lowest (highest) elements that may have been popped, are read on both
// nodes and written where they differ. The work follows the size of the
// change, not of the key: it is not paced (throttle paces only a list or
// string, which is compared whole).
//
// Why the lowest pops+named elements of the target cover every popped
// one: an element m the target holds that the source popped was among the
// c lowest of the source when popped. Below m on the target are then at
// most c-1 elements the source still held at that pop, the elements
// popped before it (at most pops-c) and elements the writes named: m's
// rank on the target is below pops + named.
func (c *Copier) Patch(ctx context.Context, k string, ch *tail.Change, throttle bool) (LargeResult, error) {
	typ, err := c.St.do1(ctx, c.Src, c.Src.C.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return LargeResult{}, fmt.Errorf("%w: TYPE %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
	}
	res := LargeResult{typ: typ}
	ms := ch.MemberList()
	switch typ {
	case "none":
		_, err = c.writeSmall(ctx, []dumped{{key: k, gone: true}})
		c.SetBased(k, false)
		return res, err
	case "zset":
		if ch.Head > 0 || ch.Tail > 0 {
			ms, err = c.popped(ctx, k, ms, ch.Head, ch.Tail)
			if err != nil {
				return res, err
			}
		}
		res.Diffs, res.written, err = c.zpatch(ctx, k, ms)
	case "hash":
		res.Diffs, res.written, err = c.hpatch(ctx, k, ms)
	case "set":
		res.Diffs, res.written, err = c.spatch(ctx, k, ms)
	default:
		if len(ms) > 0 || ch.Head > 0 || ch.Tail > 0 {
			return c.SyncLarge(ctx, k, throttle, false)
		}
	}
	if err != nil {
		return res, err
	}
	if err := c.syncTTL(ctx, k); err != nil {
		return res, err
	}
	c.St.add(0, res.written)
	c.St.Mu.Lock()
	c.St.Patched += int64(res.Diffs)
	c.St.Mu.Unlock()
	return res, nil
}

// popped adds to ms the target's head lowest and tail highest elements
// that the source may have popped (see patch).
func (c *Copier) popped(ctx context.Context, k string, ms []string, head, tail int64) ([]string, error) {
	named := int64(len(ms))
	d := c.Dst.C.B()
	read := func(from, to int64) error { // ranks, inclusive (negative from the end)
		for lo := from; lo <= to; lo += int64(c.chunk) {
			hi := min(lo+int64(c.chunk)-1, to)
			got, err := c.St.do1(ctx, c.Dst, d.Zrange().Key(k).Min(strconv.FormatInt(lo, 10)).Max(strconv.FormatInt(hi, 10)).Build()).AsStrSlice()
			if err != nil {
				return fmt.Errorf("%w: ZRANGE %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
			}
			ms = append(ms, got...)
			if int64(len(got)) < hi-lo+1 {
				return nil
			}
		}
		return nil
	}
	if head > 0 {
		if err := read(0, head+named-1); err != nil {
			return nil, err
		}
	}
	if tail > 0 {
		if err := read(-(tail + named), -1); err != nil {
			return nil, err
		}
	}
	slices.Sort(ms)
	return slices.Compact(ms), nil
}

// zpatch reads the scores of members on both nodes and writes the
// source's on the target: ZADD where they differ, ZREM where the source
// has none.
func (c *Copier) zpatch(ctx context.Context, k string, ms []string) (diffs, written int, err error) {
	s, d := c.Src.C.B(), c.Dst.C.B()
	for lo := 0; lo < len(ms); lo += c.chunk {
		part := ms[lo:min(lo+c.chunk, len(ms))]
		a, err := scores(c.St.do1(ctx, c.Src, s.Zmscore().Key(k).Member(part...).Build()))
		if err != nil {
			return diffs, written, fmt.Errorf("%w: ZMSCORE %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		b, err := scores(c.St.do1(ctx, c.Dst, d.Zmscore().Key(k).Member(part...).Build()))
		if err != nil {
			return diffs, written, fmt.Errorf("%w: ZMSCORE %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
		add := d.Zadd().Key(k).ScoreMember()
		var rem []string
		nadd := 0
		for i, m := range part {
			switch {
			case math.IsNaN(a[i]) && !math.IsNaN(b[i]):
				rem = append(rem, m)
			case !math.IsNaN(a[i]) && a[i] != b[i]:
				add = add.ScoreMember(a[i], m)
				nadd++
				written += len(m) + 8
			}
		}
		var cmds valkey.Commands
		if nadd > 0 {
			cmds = append(cmds, add.Build())
		}
		if len(rem) > 0 {
			cmds = append(cmds, d.Zrem().Key(k).Member(rem...).Build())
		}
		if err := c.writeAll(ctx, k, cmds); err != nil {
			return diffs, written, err
		}
		diffs += nadd + len(rem)
	}
	return diffs, written, nil
}

// scores decodes ZMSCORE's reply; a member without a score is NaN.
func scores(r valkey.ValkeyResult) ([]float64, error) {
	arr, err := r.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(arr))
	for i, v := range arr {
		f, err := v.AsFloat64()
		switch {
		case valkey.IsValkeyNil(err):
			out[i] = math.NaN()
		case err != nil:
			return nil, err
		default:
			out[i] = f
		}
	}
	return out, nil
}

// hpatch reads fields on both nodes (HMGET) and writes the source's values
// on the target: HSET where they differ, HDEL where the source has none.
func (c *Copier) hpatch(ctx context.Context, k string, fs []string) (diffs, written int, err error) {
	s, d := c.Src.C.B(), c.Dst.C.B()
	for lo := 0; lo < len(fs); lo += c.chunk {
		part := fs[lo:min(lo+c.chunk, len(fs))]
		a, err := c.St.do1(ctx, c.Src, s.Hmget().Key(k).Field(part...).Build()).ToArray()
		if err != nil {
			return diffs, written, fmt.Errorf("%w: HMGET %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		b, err := c.St.do1(ctx, c.Dst, d.Hmget().Key(k).Field(part...).Build()).ToArray()
		if err != nil {
			return diffs, written, fmt.Errorf("%w: HMGET %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
		set := d.Hset().Key(k).FieldValue()
		var del []string
		nset := 0
		for i, f := range part {
			va, ea := a[i].ToString()
			vb, eb := b[i].ToString()
			switch {
			case ea != nil && eb == nil:
				del = append(del, f)
			case ea == nil && (eb != nil || va != vb):
				set = set.FieldValue(f, va)
				nset++
				written += len(f) + len(va)
			}
		}
		var cmds valkey.Commands
		if nset > 0 {
			cmds = append(cmds, set.Build())
		}
		if len(del) > 0 {
			cmds = append(cmds, d.Hdel().Key(k).Field(del...).Build())
		}
		if err := c.writeAll(ctx, k, cmds); err != nil {
			return diffs, written, err
		}
		diffs += nset + len(del)
	}
	return diffs, written, nil
}

// spatch reads members on both nodes (SMISMEMBER) and writes the source's
// on the target.
func (c *Copier) spatch(ctx context.Context, k string, ms []string) (diffs, written int, err error) {
	s, d := c.Src.C.B(), c.Dst.C.B()
	for lo := 0; lo < len(ms); lo += c.chunk {
		part := ms[lo:min(lo+c.chunk, len(ms))]
		a, err := c.St.do1(ctx, c.Src, s.Smismember().Key(k).Member(part...).Build()).AsIntSlice()
		if err != nil {
			return diffs, written, fmt.Errorf("%w: SMISMEMBER %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
		}
		b, err := c.St.do1(ctx, c.Dst, d.Smismember().Key(k).Member(part...).Build()).AsIntSlice()
		if err != nil {
			return diffs, written, fmt.Errorf("%w: SMISMEMBER %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
		var add, rem []string
		for i, m := range part {
			switch {
			case a[i] == 1 && b[i] == 0:
				add = append(add, m)
				written += len(m)
			case a[i] == 0 && b[i] == 1:
				rem = append(rem, m)
			}
		}
		var cmds valkey.Commands
		if len(add) > 0 {
			cmds = append(cmds, d.Sadd().Key(k).Member(add...).Build())
		}
		if len(rem) > 0 {
			cmds = append(cmds, d.Srem().Key(k).Member(rem...).Build())
		}
		if err := c.writeAll(ctx, k, cmds); err != nil {
			return diffs, written, err
		}
		diffs += len(add) + len(rem)
	}
	return diffs, written, nil
}

// writeAll sends a patch's writes to the target.
func (c *Copier) writeAll(ctx context.Context, k string, cmds valkey.Commands) error {
	if len(cmds) == 0 {
		return nil
	}
	for _, r := range c.St.do(ctx, c.Dst, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("%w: patching %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
	}
	return nil
}

// SameSize compares the number of elements of large keys on both nodes
// (one pipeline each): under the hold, after the patches, a key whose
// sizes differ is compared whole. It returns the keys that differ.
func (c *Copier) SameSize(ctx context.Context, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	size := func(n *table.Node) ([]string, error) {
		var cmds valkey.Commands
		for _, k := range keys {
			cmds = append(cmds, n.C.B().Type().Key(k).Build())
		}
		out := make([]string, len(keys))
		types := c.St.do(ctx, n, cmds...)
		cmds = cmds[:0]
		for i, r := range types {
			t, err := r.ToString()
			if err != nil {
				return nil, fmt.Errorf("%w: TYPE %s on %s: %v", table.ErrMove, keys[i], n.Name, err)
			}
			b := n.C.B()
			switch t {
			case "zset":
				cmds = append(cmds, b.Zcard().Key(keys[i]).Build())
			case "hash":
				cmds = append(cmds, b.Hlen().Key(keys[i]).Build())
			case "set":
				cmds = append(cmds, b.Scard().Key(keys[i]).Build())
			case "list":
				cmds = append(cmds, b.Llen().Key(keys[i]).Build())
			case "string":
				cmds = append(cmds, b.Strlen().Key(keys[i]).Build())
			default: // none, streams, module types: DUMP and RESTORE whole
				cmds = append(cmds, b.Exists().Key(keys[i]).Build())
			}
			out[i] = t
		}
		for i, r := range c.St.do(ctx, n, cmds...) {
			v, err := r.AsInt64()
			if err != nil {
				return nil, fmt.Errorf("%w: the size of %s on %s: %v", table.ErrMove, keys[i], n.Name, err)
			}
			out[i] += " " + strconv.FormatInt(v, 10)
		}
		return out, nil
	}
	a, err := size(c.Src)
	if err != nil {
		return nil, err
	}
	b, err := size(c.Dst)
	if err != nil {
		return nil, err
	}
	var bad []string
	for i := range keys {
		if a[i] != b[i] {
			bad = append(bad, keys[i])
		}
	}
	return bad, nil
}

// ScanVerify verifies a large key's copy while the source is served: a
// scan of the source (ZSCAN, HSCAN, SSCAN) read against the target
// (ZMSCORE, HMGET, SMISMEMBER). An element that differs is an error unless
// a write recorded since the last take may have touched it (it is patched
// with that change). Elements only the target holds are found under the
// hold, by the sizes (sameSize). Other types are verified as before, once
// they did not change.
func (c *Copier) ScanVerify(ctx context.Context, k string) error {
	typ, err := c.St.do1(ctx, c.Src, c.Src.C.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return fmt.Errorf("%w: TYPE %s on %s: %v", table.ErrMove, k, c.Src.Name, err)
	}
	if typ != "zset" && typ != "hash" && typ != "set" {
		return nil // gone (the change says so), or verified when unchanged
	}
	var (
		mu     sync.Mutex
		differ []string
	)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages, scanErr := c.scanPages(sctx, c.Src, k, typ)
	// The target's reads of the pages go verifyDepth at a time: one at a
	// time, each waited for, the verification is a round trip per page.
	g, gctx := errgroup.WithContext(sctx)
	g.SetLimit(verifyDepth)
	for els := range pages {
		if gctx.Err() != nil {
			continue // drain: scanPages ends at the cancellation
		}
		g.Go(func() error {
			got, err := c.differing(gctx, k, typ, els)
			if err != nil {
				cancel()
				return err
			}
			read := 0
			for _, el := range els {
				read += len(el)
			}
			mu.Lock()
			differ = append(differ, got...)
			mu.Unlock()
			// The target is read page by page behind the source: pacing
			// the source's reads paces both.
			c.St.addRead(read)
			if err := c.Lim.wait(gctx, read); err != nil {
				cancel()
				return err
			}
			return nil
		})
	}
	err2 := g.Wait()
	if err := scanErr(); err2 == nil && err != nil {
		err2 = err
	}
	if err2 != nil {
		return err2
	}
	if len(differ) == 0 {
		return nil
	}
	if err := c.Tr.Barrier(ctx); err != nil {
		return err
	}
	for _, m := range differ {
		if !c.Tr.Touched(k, m) {
			return fmt.Errorf("%w: verifying %s on %s: %q differs from the source's and no write touched it since", table.ErrMove, k, c.Dst.Name, m)
		}
	}
	return nil
}

// differing returns the members (fields) of one page of a scan of the
// source whose value the target does not have.
func (c *Copier) differing(ctx context.Context, k, typ string, els []string) ([]string, error) {
	d := c.Dst.C.B()
	var out []string
	switch typ {
	case "zset", "hash":
		var names []string
		for i := 0; i+1 < len(els); i += 2 {
			names = append(names, els[i])
		}
		var r valkey.ValkeyResult
		if typ == "zset" {
			r = c.St.do1(ctx, c.Dst, d.Zmscore().Key(k).Member(names...).Build())
		} else {
			r = c.St.do1(ctx, c.Dst, d.Hmget().Key(k).Field(names...).Build())
		}
		arr, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("%w: reading %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
		for i, v := range arr {
			want := els[2*i+1]
			if typ == "zset" {
				got, err := v.AsFloat64()
				w, werr := strconv.ParseFloat(want, 64)
				if err != nil || werr != nil || got != w {
					out = append(out, names[i])
				}
				continue
			}
			if got, err := v.ToString(); err != nil || got != want {
				out = append(out, names[i])
			}
		}
	default:
		in, err := c.St.do1(ctx, c.Dst, d.Smismember().Key(k).Member(els...).Build()).AsIntSlice()
		if err != nil {
			return nil, fmt.Errorf("%w: SMISMEMBER %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
		for i, v := range in {
			if v == 0 {
				out = append(out, els[i])
			}
		}
	}
	return out, nil
}
