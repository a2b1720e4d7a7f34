package keycopy

import (
	"context"
	"fmt"
	"strconv"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// zdepth is how many chunks of a sorted set one round trip reads.
const zdepth = 8

// zchunks reads a sorted set of n in rank order, zdepth chunks per round
// trip, and hands each round trip's chunks to fn.
func (c *Copier) zchunks(ctx context.Context, n *table.Node, k string, fn func([][]valkey.ZScore) error) error {
	step := int64(c.chunk)
	for lo := int64(0); ; lo += zdepth * step {
		cmds := make(valkey.Commands, zdepth)
		for i := range cmds {
			from := lo + int64(i)*step
			cmds[i] = n.C.B().Zrange().Key(k).Min(strconv.FormatInt(from, 10)).Max(strconv.FormatInt(from+step-1, 10)).Withscores().Build()
		}
		var batch [][]valkey.ZScore
		end := false
		for _, r := range c.St.do(ctx, n, cmds...) {
			zs, err := r.AsZScores()
			if err != nil {
				return fmt.Errorf("%w: ZRANGE %s on %s: %v", table.ErrMove, k, n.Name, err)
			}
			if end {
				continue
			}
			if len(zs) > 0 {
				batch = append(batch, zs)
			}
			end = len(zs) < c.chunk
		}
		if len(batch) > 0 {
			if err := fn(batch); err != nil {
				return err
			}
		}
		if end {
			return nil
		}
	}
}

// zstream reads a sorted set in rank order ahead of its consumer.
type zstream struct {
	ch  chan []valkey.ZScore
	err error
	buf []valkey.ZScore
	eof bool
}

func (c *Copier) newZstream(ctx context.Context, n *table.Node, k string, throttle bool) *zstream {
	z := &zstream{ch: make(chan []valkey.ZScore, 4)}
	go func() {
		defer close(z.ch)
		z.err = c.zchunks(ctx, n, k, func(batch [][]valkey.ZScore) error {
			if n == c.Src {
				// Reading both nodes whole is most of a comparison's load.
				// The merge reads the target in step with the source:
				// pacing the source's reads paces both.
				read := 0
				for _, zs := range batch {
					for _, e := range zs {
						read += len(e.Member) + 8
					}
				}
				c.St.addRead(read)
				if throttle {
					if err := c.Lim.wait(ctx, read); err != nil {
						return err
					}
				}
			}
			return c.send(ctx, z, batch)
		})
	}()
	return z
}

// send hands a round trip's chunks to the stream's consumer.
func (c *Copier) send(ctx context.Context, z *zstream, batch [][]valkey.ZScore) error {
	for _, zs := range batch {
		select {
		case z.ch <- zs:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// peek returns the next element (nil at the end).
func (z *zstream) peek() *valkey.ZScore {
	for len(z.buf) == 0 && !z.eof {
		b, ok := <-z.ch
		if !ok {
			z.eof = true
			break
		}
		z.buf = b
	}
	if len(z.buf) == 0 {
		return nil
	}
	return &z.buf[0]
}

func (z *zstream) next() { z.buf = z.buf[1:] }

// zcmp orders sorted set elements as the server does: by score, then by
// member bytes.
func zcmp(a, b *valkey.ZScore) int {
	switch {
	case a.Score < b.Score:
		return -1
	case a.Score > b.Score:
		return 1
	case a.Member < b.Member:
		return -1
	case a.Member > b.Member:
		return 1
	}
	return 0
}

// zsync compares a sorted set on both nodes, reading both in rank order at
// once (a merge), and patches the target: ZADD for what the source has
// that the target lacks or scores otherwise, ZREM for what only the target
// has. It returns the elements that differed.
func (c *Copier) zsync(ctx context.Context, k string, throttle bool) (diffs, written int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, b := c.newZstream(ctx, c.Src, k, throttle), c.newZstream(ctx, c.Dst, k, throttle)
	srcOnly := map[string]float64{}
	dstOnly := map[string]bool{}
	for {
		x, y := a.peek(), b.peek()
		if x == nil && y == nil {
			break
		}
		switch {
		case y == nil || (x != nil && zcmp(x, y) < 0):
			srcOnly[x.Member] = x.Score
			a.next()
		case x == nil || zcmp(x, y) > 0:
			dstOnly[y.Member] = true
			b.next()
		default:
			a.next()
			b.next()
		}
	}
	// Both readers ended (their channels closed after their errors were set).
	for _, z := range []*zstream{a, b} {
		if z.err != nil {
			return 0, 0, z.err
		}
	}
	var rem []string
	for m := range dstOnly {
		if _, ok := srcOnly[m]; !ok {
			rem = append(rem, m)
		}
	}
	diffs = len(srcOnly) + len(rem)
	d := c.Dst.C.B()
	var add []valkey.ZScore
	for m, s := range srcOnly {
		add = append(add, valkey.ZScore{Member: m, Score: s})
	}
	for lo := 0; lo < len(add); lo += c.chunk {
		cmd := d.Zadd().Key(k).Ch().ScoreMember()
		n := 0
		for _, z := range add[lo:min(lo+c.chunk, len(add))] {
			cmd = cmd.ScoreMember(z.Score, z.Member)
			n += len(z.Member) + 8
		}
		if err := c.St.do1(ctx, c.Dst, cmd.Build()).Error(); err != nil {
			return diffs, written, fmt.Errorf("%w: ZADD %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
		written += n
		if throttle {
			if err := c.Lim.wait(ctx, n); err != nil {
				return diffs, written, err
			}
		}
	}
	for lo := 0; lo < len(rem); lo += c.chunk {
		if err := c.St.do1(ctx, c.Dst, d.Zrem().Key(k).Member(rem[lo:min(lo+c.chunk, len(rem))]...).Build()).Error(); err != nil {
			return diffs, written, fmt.Errorf("%w: ZREM %s on %s: %v", table.ErrMove, k, c.Dst.Name, err)
		}
	}
	if err := c.syncTTL(ctx, k); err != nil {
		return diffs, written, err
	}
	c.St.add(0, written)
	return diffs, written, nil
}
