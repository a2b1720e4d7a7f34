package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
)

// Member is one zset member and its score.
type Member struct {
	Name  string
	Score int64
}

// Key is the content of one key.
type Key struct {
	Type    string            // "string", "hash", "zset", or another TYPE answer
	Str     string            // string
	Hash    map[string]string // hash
	Members []Member          // zset, sorted by member name
}

// Snapshot is the keys of a node by name.
type Snapshot map[string]Key

// Names returns the key names in order.
func (s Snapshot) Names() []string { return slices.Sorted(maps.Keys(s)) }

// String renders a key the way the diffs print it.
func (k Key) String() string {
	switch k.Type {
	case "string":
		return strconv.Quote(k.Str)
	case "hash":
		parts := make([]string, 0, len(k.Hash))
		for _, f := range slices.Sorted(maps.Keys(k.Hash)) {
			parts = append(parts, f+"="+strconv.Quote(k.Hash[f]))
		}
		return "hash{" + strings.Join(parts, " ") + "}"
	case "zset":
		parts := make([]string, len(k.Members))
		for i, m := range k.Members {
			parts[i] = m.Name + "@" + strconv.FormatInt(m.Score, 10)
		}
		return "zset[" + strings.Join(parts, " ") + "]"
	}
	return "(" + k.Type + ")"
}

// ReadKeys reads every key of the node except the version key (whose value
// differs between the two paths by design): strings, hashes and zsets by
// content, any other type by its name only.
func ReadKeys(ctx context.Context, c valkey.Client) (Snapshot, error) {
	var names []string
	cursor := uint64(0)
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("%w: SCAN: %v", ErrStand, err)
		}
		names = append(names, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	names = slices.DeleteFunc(names, func(n string) bool { return n == legacy.VersionKey })
	snap := make(Snapshot, len(names))
	if len(names) == 0 {
		return snap, nil
	}
	types := make(valkey.Commands, len(names))
	for i, k := range names {
		types[i] = c.B().Type().Key(k).Build()
	}
	reads := make(valkey.Commands, len(names))
	kinds := make([]string, len(names))
	for i, r := range c.DoMulti(ctx, types...) {
		t, err := r.ToString()
		if err != nil {
			return nil, fmt.Errorf("%w: TYPE %s: %v", ErrStand, names[i], err)
		}
		kinds[i] = t
		switch t {
		case "string":
			reads[i] = c.B().Get().Key(names[i]).Build()
		case "hash":
			reads[i] = c.B().Hgetall().Key(names[i]).Build()
		case "zset":
			reads[i] = c.B().Zrange().Key(names[i]).Min("0").Max("-1").Withscores().Build()
		default:
			reads[i] = c.B().Type().Key(names[i]).Build()
		}
	}
	for i, r := range c.DoMulti(ctx, reads...) {
		k := Key{Type: kinds[i]}
		var err error
		switch k.Type {
		case "none":
			continue
		case "string":
			k.Str, err = r.ToString()
		case "hash":
			k.Hash, err = r.AsStrMap()
		case "zset":
			var zs []valkey.ZScore
			zs, err = r.AsZScores()
			for _, z := range zs {
				if z.Score != float64(int64(z.Score)) {
					return nil, fmt.Errorf("%w: %s member %s has a fractional score %v", ErrStand, names[i], z.Member, z.Score)
				}
				k.Members = append(k.Members, Member{Name: z.Member, Score: int64(z.Score)})
			}
			slices.SortFunc(k.Members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read %s: %v", ErrStand, names[i], err)
		}
		snap[names[i]] = k
	}
	return snap, nil
}
