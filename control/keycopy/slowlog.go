package keycopy

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/control/table"
)

// SlowCommand is the slowest command of the mover that a node's SLOWLOG
// kept (the server's own measure of its execution, without the network).
type SlowCommand struct {
	Node      string
	Took      time.Duration // 0: none logged
	Command   string        // the command and its first argument
	Threshold time.Duration // the node's slowlog-log-slower-than (-1: the slowlog is off)
}

// Slowest reads n's SLOWLOG for the slowest entry of a connection named
// name since since.
func Slowest(ctx context.Context, n *table.Node, name string, since time.Time) SlowCommand {
	out := SlowCommand{Node: n.Name, Threshold: -1}
	if name == "" {
		return out // unnamed: the entries cannot be told from other clients'
	}
	if m, err := n.C.Do(ctx, n.C.B().ConfigGet().Parameter("slowlog-log-slower-than").Build()).AsStrMap(); err == nil {
		if us, err := strconv.ParseInt(m["slowlog-log-slower-than"], 10, 64); err == nil && us >= 0 {
			out.Threshold = time.Duration(us) * time.Microsecond
		}
	}
	entries, err := n.C.Do(ctx, n.C.B().SlowlogGet().Count(128).Build()).ToArray()
	if err != nil {
		return out
	}
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 6 {
			continue
		}
		ts, _ := f[1].AsInt64()
		us, _ := f[2].AsInt64()
		who, _ := f[5].ToString()
		if who != name || ts < since.Unix() {
			continue
		}
		if d := time.Duration(us) * time.Microsecond; d > out.Took {
			out.Took = d
			args, _ := f[3].AsStrSlice()
			if len(args) > 2 {
				args = args[:2]
			}
			out.Command = strings.Join(args, " ")
		}
	}
	return out
}
