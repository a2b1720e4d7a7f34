package leftovers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/emqproxy/emqproxy/control/table"
)

// Batch is how many keys one UNLINK of a leftover removal names.
const Batch = 512

// Leftover is one queue's keys on a node that does not own the queue.
type Leftover struct {
	Node    string   // the node holding the keys
	Queue   string   // the queue
	Owner   string   // the queue's owner
	From    string   // "table" (the merged control table) or "route" (the configuration)
	Keys    []string // the keys found, sorted
	Removed int      // keys deleted (with Remove), as the node counted them
	Err     error    // why they were not (all) deleted, with Remove
}

// Skipped is a queue with keys on a node that is left alone, with why.
type Skipped struct {
	Node, Queue, Why string
	Keys             int
}

// Scan is what Find found.
type Scan struct {
	Leftovers []Leftover // by node, then queue
	Skipped   []Skipped  // by node, then queue
	Owned     int        // queues found on their owner (not leftovers)
}

// Keys is the number of leftover keys found.
func (s *Scan) Keys() int {
	n := 0
	for _, l := range s.Leftovers {
		n += len(l.Keys)
	}
	return n
}

// Removed is the number of leftover keys deleted.
func (s *Scan) Removed() int {
	n := 0
	for _, l := range s.Leftovers {
		n += l.Removed
	}
	return n
}

// Options says where to look and whether to delete.
type Options struct {
	Nodes     map[string]*table.Node // every reachable upstream of the configuration
	Down      map[string]error       // the upstreams that could not be dialed: the listing is refused
	FileRoute func(string) string    // the configuration's route of a queue
	Remove    bool                   // delete the leftovers found
}

// leftoverView is the owners as every node's table says them.
type leftoverView struct {
	table   table.Table     // merged
	skipped map[string]bool // queues with an entry skipped on some node
}

func readView(ctx context.Context, nodes map[string]*table.Node) (leftoverView, error) {
	v := leftoverView{skipped: map[string]bool{}}
	var tables []table.Table
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		t, err := nodes[name].ReadTable(ctx)
		if err != nil && !errors.Is(err, table.ErrTable) {
			return v, fmt.Errorf("upstream %s is unreachable (reading its control table: %v): %s", name, err, table.NeedAll)
		}
		for q := range t.Skipped {
			v.skipped[q] = true
		}
		tables = append(tables, t)
	}
	v.table = table.Merge(tables...)
	return v, nil
}

// owner is who owns queue in v, and where that was read ("table" or
// "route"), or why the queue is left alone.
func (v leftoverView) owner(nodes map[string]*table.Node, route func(string) string, queue string) (owner, from, skip string) {
	if v.skipped[queue] {
		return "", "", "an entry of its control table is skipped (it does not parse): its owner is not known"
	}
	e, ok := v.table.Queues[queue]
	if !ok {
		owner, from = route(queue), "route"
	} else {
		if e.State != table.Owned {
			return "", "", fmt.Sprintf("held on %s at epoch %d (a move in progress)", e.Owner, e.Epoch)
		}
		owner, from = e.Owner, "table"
	}
	if nodes[owner] == nil {
		return "", "", fmt.Sprintf("its owner %q is not a reachable upstream of the configuration", owner)
	}
	return owner, from, ""
}

// moving says whether a move of queue has a record on any node, and where.
func moving(ctx context.Context, nodes map[string]*table.Node, queue string) (string, error) {
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[name]
		r := n.C.DoMulti(ctx,
			n.C.B().Exists().Key(table.MoveKey(queue)).Build(),
			n.C.B().Hexists().Key(table.KeyMoves).Field(queue).Build())
		for _, x := range r {
			k, err := x.AsInt64()
			if err != nil {
				return "", fmt.Errorf("upstream %s: reading the move record of %s: %v: %s", name, queue, err, table.NeedAll)
			}
			if k > 0 {
				return fmt.Sprintf("a move is in progress (its record is on %s)", name), nil
			}
		}
	}
	return "", nil
}

// QueueOfKey returns the queue of a key "emq:{<queue>}:...", or false.
func QueueOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "emq:{")
	if !ok {
		return "", false
	}
	q, _, ok := strings.Cut(rest, "}:")
	if !ok || q == "" || strings.ContainsAny(q, "{}") {
		return "", false
	}
	return q, true
}

// Find lists, on every node, the keys of the queues that node does
// not own, and deletes them with Remove. Per queue and node, an error of
// the deletion is in the Leftover (the others go on); an error reading a
// table, a record or a node's keys ends the listing.
func Find(ctx context.Context, o Options) (*Scan, error) {
	for _, name := range slices.Sorted(maps.Keys(o.Down)) {
		return nil, fmt.Errorf("upstream %s is unreachable (%v): %s", name, o.Down[name], table.NeedAll)
	}
	view, err := readView(ctx, o.Nodes)
	if err != nil {
		return nil, err
	}
	scan := &Scan{}
	moves := map[string]string{} // queue -> why it is left alone ("" when not)
	for _, name := range slices.Sorted(maps.Keys(o.Nodes)) {
		n := o.Nodes[name]
		found, counts, err := foreignKeys(ctx, n, func(q string) bool {
			owner, _, skip := view.owner(o.Nodes, o.FileRoute, q)
			return skip != "" || owner != name
		})
		if err != nil {
			return nil, fmt.Errorf("upstream %s: listing its queues' keys: %w", name, err)
		}
		for _, q := range slices.Sorted(maps.Keys(counts)) {
			keys := found[q]
			if keys == nil {
				scan.Owned++
				continue
			}
			owner, from, skip := view.owner(o.Nodes, o.FileRoute, q)
			if skip == "" {
				why, seen := moves[q]
				if !seen {
					if why, err = moving(ctx, o.Nodes, q); err != nil {
						return nil, err
					}
					moves[q] = why
				}
				skip = why
			}
			if skip != "" {
				scan.Skipped = append(scan.Skipped, Skipped{Node: name, Queue: q, Why: skip, Keys: len(keys)})
				continue
			}
			slices.Sort(keys)
			l := Leftover{Node: name, Queue: q, Owner: owner, From: from, Keys: keys}
			if o.Remove {
				l.Removed, l.Err = removeLeftover(ctx, o, n, q, owner, keys)
			}
			scan.Leftovers = append(scan.Leftovers, l)
		}
	}
	return scan, nil
}

// foreignKeys scans n's keys of every queue: counts has every queue seen
// (its keys counted), found the keys of those foreign says n does not own.
func foreignKeys(ctx context.Context, n *table.Node, foreign func(queue string) bool) (found map[string][]string, counts map[string]int, err error) {
	found, counts = map[string][]string{}, map[string]int{}
	verdict := map[string]bool{}
	var cursor uint64
	for {
		e, err := n.C.Do(ctx, n.C.B().Scan().Cursor(cursor).Match("emq:{*}:*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, nil, err
		}
		for _, k := range e.Elements {
			q, ok := QueueOfKey(k)
			if !ok {
				continue
			}
			counts[q]++
			f, seen := verdict[q]
			if !seen {
				f = foreign(q)
				verdict[q] = f
			}
			if f {
				found[q] = append(found[q], k)
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	for q, keys := range found {
		slices.Sort(keys)
		found[q] = slices.Compact(keys) // SCAN may return a key twice
	}
	return found, counts, nil
}

// removeLeftover deletes queue's keys on n after checking again, on every
// node, that n does not own the queue and that no move of it started.
func removeLeftover(ctx context.Context, o Options, n *table.Node, queue, owner string, keys []string) (int, error) {
	view, err := readView(ctx, o.Nodes)
	if err != nil {
		return 0, err
	}
	now, _, skip := view.owner(o.Nodes, o.FileRoute, queue)
	if skip == "" {
		if skip, err = moving(ctx, o.Nodes, queue); err != nil {
			return 0, err
		}
	}
	switch {
	case skip != "":
		return 0, fmt.Errorf("not removed: %s", skip)
	case now != owner || now == n.Name:
		return 0, fmt.Errorf("not removed: its owner changed to %s meanwhile", now)
	}
	done := 0
	for lo := 0; lo < len(keys); lo += Batch {
		part := keys[lo:min(lo+Batch, len(keys))]
		k, err := n.C.Do(ctx, n.C.B().Unlink().Key(part...).Build()).AsInt64()
		if err != nil {
			return done, err
		}
		done += int(k) // a key gone meanwhile is not counted
	}
	return done, nil
}
