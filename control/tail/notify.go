package tail

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/rewrite"
)

// KeyNotify is the hash, on a node, of the movers that turned its keyspace
// notifications on: field "saved" is the node's notify-keyspace-events
// before the first of them did, and one field "queue:<q>" per move that
// still needs them. The last move to finish writes "saved" back.
const KeyNotify = rewrite.ControlKeyPrefix + ":notify"

// notifyFlags are the keyspace notification classes the tracking needs:
// K (keyspace channels) and A (every class of write: generic, string, list,
// set, hash, zset, expired, evicted, stream, module key types).
const notifyFlags = "Kg$lshzxetd"

// notifyNeeded are the classes that must stay on while a move tracks the
// queue (module key types are not needed: "d" may be missing on old
// servers).
const notifyNeeded = "Kg$lshzxet"

// expandNotify expands the alias A of a notify-keyspace-events value.
func expandNotify(s string) string {
	return strings.ReplaceAll(s, "A", "g$lshzxetd")
}

// NotifyCovers reports whether the setting v delivers every event the
// tracking needs.
func NotifyCovers(v string) bool {
	v = expandNotify(v)
	for _, c := range notifyNeeded {
		if !strings.ContainsRune(v, c) {
			return false
		}
	}
	return true
}

// notifyUnion is the setting v with the tracking's classes added.
func notifyUnion(v string) string {
	var out []rune
	for _, c := range expandNotify(v) + notifyFlags {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return string(out)
}

// GetNotify reads the node's notify-keyspace-events.
func GetNotify(ctx context.Context, c valkey.CoreClient) (string, error) {
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	if err != nil {
		return "", err
	}
	v, ok := m["notify-keyspace-events"]
	if !ok {
		return "", errors.New("CONFIG GET notify-keyspace-events answered nothing")
	}
	return v, nil
}

// acquireNotify turns on the keyspace notifications the tracking of queue
// needs on n, recording the node's previous setting (once, for every
// mover) and the queue among the movers that need them. It returns the
// setting in force.
func acquireNotify(ctx context.Context, n *table.Node, queue string) (string, error) {
	var out string
	err := watched(ctx, n, KeyNotify, func(dc valkey.DedicatedClient, m map[string]string) (valkey.Commands, error) {
		cur, err := GetNotify(ctx, dc)
		if err != nil {
			return nil, err
		}
		saved, ok := m["saved"]
		if !ok {
			saved = cur
		}
		out = notifyUnion(cur)
		cmds := valkey.Commands{dc.B().Hset().Key(KeyNotify).FieldValue().FieldValue("saved", saved).
			FieldValue("queue:"+queue, strconv.FormatInt(time.Now().UnixMilli(), 10)).Build()}
		if out != cur {
			cmds = append(cmds, dc.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", out).Build())
		}
		return cmds, nil
	})
	if err != nil {
		return "", fmt.Errorf("upstream %s: turning on keyspace notifications (the mover needs CONFIG GET and CONFIG SET): %w", n.Name, err)
	}
	return out, nil
}

// ReleaseNotify removes queue from the movers that need keyspace
// notifications on n; the last one writes the node's saved setting back.
// A queue that is not among them changes nothing.
func ReleaseNotify(ctx context.Context, n *table.Node, queue string) (restored bool, err error) {
	err = watched(ctx, n, KeyNotify, func(dc valkey.DedicatedClient, m map[string]string) (valkey.Commands, error) {
		restored = false
		if _, ok := m["queue:"+queue]; !ok {
			return nil, nil
		}
		others := 0
		for f := range m {
			if strings.HasPrefix(f, "queue:") && f != "queue:"+queue {
				others++
			}
		}
		if others > 0 {
			return valkey.Commands{dc.B().Hdel().Key(KeyNotify).Field("queue:" + queue).Build()}, nil
		}
		restored = true
		return valkey.Commands{
			dc.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", m["saved"]).Build(),
			dc.B().Del().Key(KeyNotify).Build(),
		}, nil
	})
	if err != nil {
		return false, fmt.Errorf("upstream %s: restoring notify-keyspace-events: %w", n.Name, err)
	}
	return restored, nil
}

// watched runs build under WATCH key (a hash) with the hash's content,
// then its commands in MULTI/EXEC; a concurrent change retries.
func watched(ctx context.Context, n *table.Node, key string, build func(valkey.DedicatedClient, map[string]string) (valkey.Commands, error)) error {
	for range 20 {
		var again bool
		err := n.C.Dedicated(func(dc valkey.DedicatedClient) error {
			if err := dc.Do(ctx, dc.B().Watch().Key(key).Build()).Error(); err != nil {
				return err
			}
			m, err := dc.Do(ctx, dc.B().Hgetall().Key(key).Build()).AsStrMap()
			if err != nil {
				return err
			}
			cmds, err := build(dc, m)
			if err != nil || len(cmds) == 0 {
				_ = dc.Do(ctx, dc.B().Unwatch().Build()).Error()
				return err
			}
			all := append(valkey.Commands{dc.B().Multi().Build()}, cmds...)
			all = append(all, dc.B().Exec().Build())
			rs := dc.DoMulti(ctx, all...)
			for _, r := range rs[:len(rs)-1] {
				if err := r.Error(); err != nil {
					return err
				}
			}
			err = table.ExecError(rs[len(rs)-1])
			if valkey.IsValkeyNil(err) {
				again = true
				return nil
			}
			return err
		})
		if err != nil || !again {
			return err
		}
	}
	return fmt.Errorf("%s kept changing under WATCH", key)
}

// NotifyStatus describes who holds a node's keyspace notifications on (for
// queue status): "" when no mover does.
func NotifyStatus(ctx context.Context, n *table.Node) string {
	m, err := n.C.Do(ctx, n.C.B().Hgetall().Key(KeyNotify).Build()).AsStrMap()
	if err != nil || len(m) == 0 {
		return ""
	}
	var qs []string
	for f := range m {
		if q, ok := strings.CutPrefix(f, "queue:"); ok {
			qs = append(qs, q)
		}
	}
	slices.Sort(qs)
	return fmt.Sprintf("keyspace notifications on for the move of %s (restored to %q when it ends)", strings.Join(qs, ", "), m["saved"])
}
