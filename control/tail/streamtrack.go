package tail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/rewrite"
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
// gets its own fork at once, as with the setting at 0.
//
// The value is saved on the node (KeySyncDelay) in the same transaction
// that sets it to 0, and deleted in the one that puts it back: a mover
// killed within that moment leaves the save, and the next join on the
// node, or an --abort (RestoreSyncDelay), puts the value back.
func quickJoin(ctx context.Context, n *table.Node) (restore func() string) {
	none := func() string { return "" }
	info, err := n.C.Do(ctx, n.C.B().Info().Section("replication").Build()).ToString()
	if err != nil || infoFields(info)["repl_backlog_active"] == "1" {
		return none
	}
	if _, err := RestoreSyncDelay(ctx, n); err != nil {
		return none
	}
	cfg, err := n.C.Do(ctx, n.C.B().ConfigGet().Parameter("repl-diskless-sync*").Build()).AsStrMap()
	prev := cfg["repl-diskless-sync-delay"]
	if err != nil || cfg["repl-diskless-sync"] != "yes" || prev == "" || prev == "0" {
		return none
	}
	saved := false
	err = watched(ctx, n, KeySyncDelay, func(dc valkey.DedicatedClient, m map[string]string) (valkey.Commands, error) {
		if len(m) > 0 {
			return nil, nil // another join's, under way
		}
		run, err := runID(ctx, dc)
		if err != nil {
			return nil, err
		}
		id, err := dc.Do(ctx, dc.B().ClientId().Build()).AsInt64()
		if err != nil {
			return nil, err
		}
		saved = true
		return valkey.Commands{
			dc.B().Hset().Key(KeySyncDelay).FieldValue().FieldValue("saved", prev).FieldValue("run_id", run).
				FieldValue("client", strconv.FormatInt(id, 10)).Build(),
			dc.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", "0").Build(),
		}, nil
	})
	if err != nil || !saved {
		if err != nil {
			// Refused (CONFIG SET not allowed): the save, if written, is
			// not one.
			_ = n.C.Do(ctx, n.C.B().Del().Key(KeySyncDelay).Build()).Error()
		}
		return none
	}
	b := n.C.B()
	return func() string {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := syncDelayTx(ctx, n, b.ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", prev).Build(),
			b.Del().Key(KeySyncDelay).Build()); err != nil {
			return fmt.Sprintf("its repl-diskless-sync-delay was set to 0 for the join, and putting back %s failed: %v (CONFIG SET repl-diskless-sync-delay %s)", prev, err, prev)
		}
		return fmt.Sprintf("its repl-diskless-sync-delay (%s s) was set to 0 for the join and put back", prev)
	}
}

// KeySyncDelay is the hash in which a join saves the node's
// repl-diskless-sync-delay while it has set it to 0 (quickJoin): field
// "saved" the value, "run_id" the node's run (a failover's new primary
// never had it set), "client" the CLIENT ID of the connection that set it.
const KeySyncDelay = rewrite.ControlKeyPrefix + ":syncdelay"

// RestoreSyncDelay puts back the repl-diskless-sync-delay that a killed
// mover's join left at 0 on n: the save in KeySyncDelay is a killed
// mover's when its connection is gone from the node (CLIENT LIST ID); a
// join under way, or a mover stalled in one, still has it, and its save
// is left alone. A save of another run of the node is deleted. It reports
// whether it put a value back.
func RestoreSyncDelay(ctx context.Context, n *table.Node) (restored bool, err error) {
	err = watched(ctx, n, KeySyncDelay, func(dc valkey.DedicatedClient, m map[string]string) (valkey.Commands, error) {
		restored = false
		if len(m) == 0 {
			return nil, nil
		}
		run, err := runID(ctx, dc)
		if err != nil {
			return nil, err
		}
		del := dc.B().Del().Key(KeySyncDelay).Build()
		if run != m["run_id"] || m["saved"] == "" {
			return valkey.Commands{del}, nil
		}
		if _, perr := strconv.ParseUint(m["client"], 10, 64); perr == nil {
			list, err := dc.Do(ctx, dc.B().Arbitrary("CLIENT", "LIST", "ID", m["client"]).Build()).ToString()
			if err != nil {
				return nil, err
			}
			// (RESP3 gives the list as a verbatim string: "txt:" first.)
			if strings.Contains(list, "id="+m["client"]+" ") {
				return nil, nil // its join is under way
			}
		}
		restored = true
		return valkey.Commands{dc.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", m["saved"]).Build(), del}, nil
	})
	if err != nil {
		return false, fmt.Errorf("upstream %s: putting back repl-diskless-sync-delay: %w", n.Name, err)
	}
	return restored, nil
}

// syncDelayTx runs cmds in one MULTI/EXEC on n: the setting and its save
// change together.
func syncDelayTx(ctx context.Context, n *table.Node, cmds ...valkey.Completed) error {
	b := n.C.B()
	all := append(append(valkey.Commands{b.Multi().Build()}, cmds...), b.Exec().Build())
	res := n.C.DoMulti(ctx, all...)
	for _, r := range res[:len(res)-1] {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return table.ExecError(res[len(res)-1])
}

// runID is the node's run_id (INFO server).
func runID(ctx context.Context, c valkey.CoreClient) (string, error) {
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", err
	}
	return infoFields(info)["run_id"], nil
}
