package control

import (
	"context"
	"fmt"
	"strings"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// Late writers (docs/queue-move.md, "Late writers").
//
// A proxy the mover waited out (its lease key expired on the source) may
// still be alive: stopped and continued, its clock or the node's stepped,
// a write stuck behind a WAIT or in a TCP retransmission. A command it
// admitted under its lease may reach the source after the hold, after the
// tail was copied, after the flip. The node cannot refuse it by epoch (the
// module, which the project does not own, checks only its own version), so
// the mover uses what every server has: it closes, on the source, every
// data connection of the proxies it waited out, after the hold and before
// it copies the tail. A command on a closed connection never runs (the
// server read nothing more of it); the proxy resends a command only on a
// new connection, and only after it checked its lease and its table again
// once that connection is open (package proxy's control.go, caughtUp: a
// new connection reads the node's epoch, which has the hold, and a proxy
// that has not applied it holds the node's queues until it has).
//
// The proxies name their data connections DataClientName(id) (CLIENT
// SETNAME at each connection's boot). The other queues of the node lose
// nothing but the connections of proxies that are gone by their leases
// anyway: such a proxy serves none of the node's queues until it renews.

// closeWaitedOut closes on src every data connection of the proxies ids
// (those waitAcks waited out). An error stops the move with the queue held:
// the tail is not copied while a late writer may still write.
func (m *Mover) closeWaitedOut(ctx context.Context, src *table.Node, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	kill, err := dataConns(ctx, src.C, ids)
	if err != nil {
		return fmt.Errorf("%w: closing the connections of the proxies waited out (%s) on %s: %v: the queue stays held; --resume tries again, --abort releases it",
			table.ErrMove, strings.Join(ids, ", "), src.Name, err)
	}
	closed := 0
	if len(kill) > 0 {
		cmds := make(valkey.Commands, len(kill))
		for i, id := range kill {
			cmds[i] = src.C.B().ClientKill().Id(id).Build()
		}
		for _, r := range src.C.DoMulti(ctx, cmds...) {
			if err := r.Error(); err == nil {
				closed++
			} else if _, server := valkey.IsValkeyErr(err); !server {
				// A server error means the connection was gone already.
				return fmt.Errorf("%w: closing the connections of the proxies waited out on %s: %v: the queue stays held; --resume tries again, --abort releases it",
					table.ErrMove, src.Name, err)
			}
		}
	}
	m.say("closed %d connections of %d proxies waited out on %s", closed, len(ids), src.Name)
	return nil
}

// dataConns lists the ids (CLIENT LIST) of the data connections of the
// proxies ids.
func dataConns(ctx context.Context, c valkey.Client, ids []string) ([]int64, error) {
	names := map[string]bool{}
	for _, id := range ids {
		names[table.DataClientName(id)] = true
	}
	list, err := c.Do(ctx, c.B().ClientList().TypeNormal().Build()).ToString()
	if err != nil {
		return nil, err
	}
	var out []int64
	for line := range strings.SplitSeq(list, "\n") {
		var id int64
		var name string
		for f := range strings.FieldsSeq(line) {
			switch {
			case strings.HasPrefix(f, "id="):
				_, _ = fmt.Sscan(f[3:], &id)
			case strings.HasPrefix(f, "name="):
				name = f[5:]
			}
		}
		if id != 0 && names[name] {
			out = append(out, id)
		}
	}
	return out, nil
}
