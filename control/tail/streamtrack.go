package tail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/emqproxy/emqproxy/control/table"
)

// openStream joins the source's replication stream for the tracker and
// starts reading it. Every key counts as changed.
func (t *Tracker) openStream(ctx context.Context) error {
	restore := quickJoin(ctx, t.n)
	rs, info, err := openReplStream(ctx, t.n.Opts)
	info.Delay = restore()
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

// quickJoin spares the join the node's repl-diskless-sync-delay (5 s by
// default), which a full synchronisation waits before it forks so that
// replicas arriving together share one fork: the reader joins a node
// without a replication backlog (no replica, or none for
// repl-backlog-ttl) with a full synchronisation, of an empty RDB. When the
// node would delay it, the delay is set to 0 for the join, and the
// function returned puts the node's value back once the join is answered
// (the fork has begun), and says so for the mover's output (or that
// putting it back failed, with the command that does it). A node that
// refuses CONFIG SET is left as it is: the join then waits its delay.
// Another replica that asks for a full synchronisation within that moment
// gets its own fork at once, as with the setting at 0; a mover killed
// within it leaves the setting at 0.
func quickJoin(ctx context.Context, n *table.Node) (restore func() string) {
	none := func() string { return "" }
	info, err := n.C.Do(ctx, n.C.B().Info().Section("replication").Build()).ToString()
	if err != nil || infoFields(info)["repl_backlog_active"] == "1" {
		return none
	}
	cfg, err := n.C.Do(ctx, n.C.B().ConfigGet().Parameter("repl-diskless-sync*").Build()).AsStrMap()
	prev := cfg["repl-diskless-sync-delay"]
	if err != nil || cfg["repl-diskless-sync"] != "yes" || prev == "" || prev == "0" {
		return none
	}
	set := func(ctx context.Context, v string) error {
		return n.C.Do(ctx, n.C.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", v).Build()).Error()
	}
	if set(ctx, "0") != nil {
		return none
	}
	return func() string {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := set(ctx, prev); err != nil {
			return fmt.Sprintf("its repl-diskless-sync-delay was set to 0 for the join, and putting back %s failed: %v (CONFIG SET repl-diskless-sync-delay %s)", prev, err, prev)
		}
		return fmt.Sprintf("its repl-diskless-sync-delay (%s s) was set to 0 for the join and put back", prev)
	}
}
