package controltest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/node"
)

// Pair is a source and a target node of one server, as control nodes.
func Pair(t *testing.T, srv node.Server) (*table.Node, *table.Node) {
	t.Helper()
	var out []*table.Node
	for _, name := range []string{"src", "dst"} {
		n := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		c, err := table.Dial(table.NodeOptions{Name: name, Address: n.Addr, Password: n.Opts.Password})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		// A mover joining a node without a backlog waits the server's
		// repl-diskless-sync-delay (5 s) for its full synchronisation:
		// nothing a test here looks at.
		Must(t, c.C, c.C.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", "0").Build())
		out = append(out, c)
	}
	return out[0], out[1]
}

func Must(t *testing.T, c valkey.Client, cmds ...valkey.Completed) {
	t.Helper()
	for _, r := range c.DoMulti(context.Background(), cmds...) {
		if err := r.Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// FillLarge writes a large sorted set (ties, negative, fractional and
// infinite scores), hash, set, list (with repeats) and string under queue
// q, the hash with a TTL.
func FillLarge(t *testing.T, n *table.Node, q string, size int) []string {
	t.Helper()
	p := "emq:{" + q + "}:"
	b := n.C.B()
	var cmds valkey.Commands
	for lo := 0; lo < size; lo += 500 {
		z := b.Zadd().Key(p + "pending").ScoreMember()
		h := b.Hset().Key(p + "h").FieldValue()
		var members, elems []string
		for i := lo; i < min(lo+500, size); i++ {
			score := float64(i%97) - 40.5
			switch i % 1000 {
			case 1:
				score = math.Inf(1)
			case 2:
				score = math.Inf(-1)
			case 3:
				score = 1e300 / 3
			}
			z = z.ScoreMember(score, fmt.Sprintf("J%07d", i))
			h = h.FieldValue(fmt.Sprintf("f%d", i), strings.Repeat("v", i%50))
			members = append(members, fmt.Sprintf("m%d", i))
			elems = append(elems, fmt.Sprintf("e%d", i%300))
		}
		cmds = append(cmds, z.Build(), h.Build(), b.Sadd().Key(p+"s").Member(members...).Build(), b.Rpush().Key(p+"l").Element(elems...).Build())
	}
	cmds = append(cmds, b.Set().Key(p+"str").Value(strings.Repeat("0123456789abcdef", 64<<10)).Build(),
		b.Pexpire().Key(p+"h").Milliseconds(600_000).Build())
	Must(t, n.C, cmds...)
	return []string{p + "pending", p + "h", p + "s", p + "l", p + "str"}
}

// Content is what EqualKeys compares of a key on a node (keycopy.Content,
// passed in: controltest sits below keycopy).
type Content func(ctx context.Context, n *table.Node, key string) (string, error)

// EqualKeys fails the test unless every key has the same content on src
// and dst. The keys are compared by several workers at once: a queue of
// 100k keys read one round trip at a time took most of a minute under the
// race detector, and the client pipelines concurrent reads.
func EqualKeys(t *testing.T, content Content, src, dst *table.Node, keys []string) {
	t.Helper()
	ctx := context.Background()
	const workers = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		next     atomic.Int64
	)
	fail := func(msg string) {
		mu.Lock()
		failures = append(failures, msg)
		mu.Unlock()
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(keys); i = int(next.Add(1) - 1) {
				k := keys[i]
				a, err := content(ctx, src, k)
				var b string
				if err == nil {
					b, err = content(ctx, dst, k)
				}
				switch {
				case err != nil:
					fail(err.Error())
				case a != b:
					fail(fmt.Sprintf("%s differs: source %d bytes of content, target %d", k, len(a), len(b)))
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(failures)
	for _, f := range failures {
		t.Error(f)
	}
}
