package tail

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/emqproxy/emqproxy/control/table"
)

// openStream joins the source's replication stream for the tracker and
// starts reading it. Every key counts as changed.
func (t *Tracker) openStream(ctx context.Context) error {
	rs, info, err := openReplStream(ctx, t.n.Opts)
	if err != nil {
		return err
	}
	gen := t.begin(true, func() { t.rs, t.joined = rs, info })
	go t.readStream(gen, rs)
	return nil
}

// readStream records the changes of every command of the stream until it
// ends (a loss, unless the tracker closed it).
func (t *Tracker) readStream(gen int, rs *replStream) {
	db := t.n.Opts.DB
	bchan := []byte(t.bchan)
	for {
		cdb, argv, err := rs.next()
		if cdb < 0 {
			// Joined from the backlog, before the stream's first SELECT:
			// the database is not known yet. Counting it as ours marks
			// too much (a key of another database under the queue's
			// prefix is read again), never too little.
			cdb = db
		}
		if err != nil {
			t.mu.Lock()
			if t.gen == gen && t.lost == nil {
				t.lost = err
			}
			t.mu.Unlock()
			return
		}
		if len(argv) == 3 && bytes.EqualFold(argv[0], []byte("PUBLISH")) && bytes.Equal(argv[1], bchan) {
			t.mu.Lock()
			if t.gen == gen {
				if ch, ok := t.waits[string(argv[2])]; ok {
					close(ch)
					delete(t.waits, string(argv[2]))
				}
			}
			t.mu.Unlock()
			continue
		}
		t.mu.Lock()
		if t.gen != gen {
			t.mu.Unlock()
			return
		}
		counted := false
		lost := streamEffect(cdb, db, argv, t.kprefix, func(key []byte, fn func(*Change)) {
			c, ok := t.dirty[string(key)]
			if !ok {
				c = &Change{}
				if !t.members[string(key)] {
					// Copied whole when it changes (a small key): its
					// members would only cost memory.
					c.Whole = true
				}
				t.dirty[string(key)] = c
			}
			fn(c)
			if !counted {
				t.events++
				counted = true
			}
		})
		if lost != "" && t.lost == nil {
			t.lost = errors.New(lost)
		}
		t.mu.Unlock()
	}
}

// streamAllowed checks what must stay true while the mover reads the
// source's replication stream (minReplicas).
func streamAllowed(ctx context.Context, n *table.Node) error {
	m, err := n.C.Do(ctx, n.C.B().ConfigGet().Parameter("min-replicas-to-write").Build()).AsStrMap()
	if err != nil {
		return fmt.Errorf("CONFIG GET min-replicas-to-write: %v", err)
	}
	return minReplicas(n.Name, m["min-replicas-to-write"])
}

// minReplicas refuses a node whose min-replicas-to-write is v, unless it
// is 0: the reader's acknowledgements would make it count as a replica
// toward it.
func minReplicas(name, v string) error {
	if v == "0" {
		return nil
	}
	return fmt.Errorf("%w: %s has min-replicas-to-write %s: the reader's acknowledgements would count as a replica toward it", ErrReplRefused, name, v)
}
