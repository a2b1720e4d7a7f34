package keycopy

import (
	"context"
	"slices"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/emqproxy/emqproxy/rewrite"
)

// JobCore are the suffixes of job-core keys under emq:{q}: (job-core.md).
var JobCore = []string{"pending", "delayed", "active", "done", "dead", "paused"}

// ScanQueue returns the keys under the queue's hashtag on n (at most limit
// when limit > 0).
func ScanQueue(ctx context.Context, n *table.Node, queue string, limit int) ([]string, error) {
	pattern := "emq:{" + rewrite.GlobEscape(queue) + "}:*"
	var out []string
	var cursor uint64
	for {
		e, err := n.C.Do(ctx, n.C.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
		}
		out = append(out, e.Elements...)
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
