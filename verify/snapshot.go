package verify

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// Member is one zset member with its score.
type Member struct {
	Name  string
	Score float64
}

// Value is the content of one key, by type.
type Value struct {
	Type    string            // "string", "hash", "zset", "list", "set"
	Str     string            // string
	Hash    map[string]string // hash, compared as a map
	Members []Member          // zset, in ZRANGE order
	Items   []string          // list (in order) or set (sorted)
}

// Snapshot is the keys of one queue (or of the whole keyspace), with the
// queue's name replaced by Q in each key name.
type Snapshot map[string]Value

// queueKey is the prefix of every key of queue q.
func queueKey(q string) string { return "emq:{" + q + "}:" }

// normalKey takes the queue name out of a key name.
func normalKey(key, q string) string {
	if rest, ok := strings.CutPrefix(key, queueKey(q)); ok {
		return "emq:{Q}:" + rest
	}
	return key
}

// snapshotQueue reads every key under queue q's hashtag.
func snapshotQueue(ctx context.Context, c valkey.Client, q string) (Snapshot, error) {
	keys, err := scanKeys(ctx, c, queueKey(q)+"*")
	if err != nil {
		return nil, err
	}
	return readKeys(ctx, c, keys, q)
}

// scanKeys lists the keys matching pattern ("" = all).
func scanKeys(ctx context.Context, c valkey.Client, pattern string) ([]string, error) {
	var out []string
	cursor := uint64(0)
	for {
		b := c.B().Scan().Cursor(cursor)
		var cmd valkey.Completed
		if pattern != "" {
			cmd = b.Match(pattern).Count(1000).Build()
		} else {
			cmd = b.Count(1000).Build()
		}
		e, err := c.Do(ctx, cmd).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("%w: SCAN: %v", ErrServer, err)
		}
		out = append(out, e.Elements...)
		if e.Cursor == 0 {
			break
		}
		cursor = e.Cursor
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// readKeys reads the keys' types and contents; q ("" = none) is taken out
// of the names.
func readKeys(ctx context.Context, c valkey.Client, keys []string, q string) (Snapshot, error) {
	snap := make(Snapshot, len(keys))
	if len(keys) == 0 {
		return snap, nil
	}
	types := make(valkey.Commands, len(keys))
	for i, k := range keys {
		types[i] = c.B().Type().Key(k).Build()
	}
	tres := c.DoMulti(ctx, types...)
	reads := make(valkey.Commands, len(keys))
	kinds := make([]string, len(keys))
	for i, k := range keys {
		t, err := tres[i].ToString()
		if err != nil {
			return nil, fmt.Errorf("%w: TYPE %s: %v", ErrServer, k, err)
		}
		kinds[i] = t
		switch t {
		case "string":
			reads[i] = c.B().Get().Key(k).Build()
		case "hash":
			reads[i] = c.B().Hgetall().Key(k).Build()
		case "zset":
			reads[i] = c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()
		case "list":
			reads[i] = c.B().Lrange().Key(k).Start(0).Stop(-1).Build()
		case "set":
			reads[i] = c.B().Smembers().Key(k).Build()
		default: // gone meanwhile, or a type the harness does not read
			reads[i] = c.B().Type().Key(k).Build()
		}
	}
	rres := c.DoMulti(ctx, reads...)
	for i, k := range keys {
		v := Value{Type: kinds[i]}
		var err error
		switch kinds[i] {
		case "none":
			continue
		case "string":
			v.Str, err = rres[i].ToString()
		case "hash":
			v.Hash, err = rres[i].AsStrMap()
		case "zset":
			var zs []valkey.ZScore
			zs, err = rres[i].AsZScores()
			for _, z := range zs {
				v.Members = append(v.Members, Member{Name: z.Member, Score: z.Score})
			}
		case "list":
			v.Items, err = rres[i].AsStrSlice()
		case "set":
			v.Items, err = rres[i].AsStrSlice()
			slices.Sort(v.Items)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read %s: %v", ErrServer, k, err)
		}
		snap[normalKey(k, q)] = v
	}
	return snap, nil
}

// clone returns a deep copy.
func (s Snapshot) clone() Snapshot {
	out := make(Snapshot, len(s))
	for k, v := range s {
		nv := v
		if v.Hash != nil {
			nv.Hash = maps.Clone(v.Hash)
		}
		nv.Members = slices.Clone(v.Members)
		nv.Items = slices.Clone(v.Items)
		out[k] = nv
	}
	return out
}

// sortedKeys returns the snapshot's key names in order.
func (s Snapshot) sortedKeys() []string {
	return slices.Sorted(maps.Keys(s))
}

// score renders a zset score as an integer when it is one.
func score(f float64) string {
	if f == float64(int64(f)) {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// String renders a value compactly for a report.
func (v Value) String() string {
	switch v.Type {
	case "string":
		return strconv.Quote(v.Str)
	case "hash":
		parts := make([]string, 0, len(v.Hash))
		for _, f := range slices.Sorted(maps.Keys(v.Hash)) {
			parts = append(parts, f+"="+strconv.Quote(v.Hash[f]))
		}
		return "hash{" + strings.Join(parts, " ") + "}"
	case "zset":
		parts := make([]string, len(v.Members))
		for i, m := range v.Members {
			parts[i] = m.Name + "@" + score(m.Score)
		}
		return "zset[" + strings.Join(parts, " ") + "]"
	}
	return v.Type + fmt.Sprint(v.Items)
}
