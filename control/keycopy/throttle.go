package keycopy

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// DefaultRate is the rate of the bulk copy while the queue is served (the
// round that reads every key, and large keys read whole; the rounds of
// changed keys are not paced), in bytes per second of copied values, when
// --rate is not given: about 20k job rows a
// second, a third of what an unpaced mover copies on a small machine, so
// that the nodes keep answering other queues near their usual latency
// (docs/queue-move.md, "Measured").
const DefaultRate = 2 << 20

// ParseRate parses a --rate value: bytes per second, with an optional
// unit (k, m, g: powers of 1000; KiB, MiB, GiB: powers of 1024; a trailing
// "B" or "/s" is allowed). "0" (or "unlimited") copies as fast as the
// nodes answer.
func ParseRate(s string) (int64, error) {
	v := strings.TrimSpace(s)
	if v == "unlimited" {
		return 0, nil
	}
	v = strings.TrimSuffix(v, "/s")
	mult := int64(1)
	lower := strings.ToLower(v)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"b", 1}} {
		if strings.HasSuffix(lower, u.suf) {
			mult, v = u.m, v[:len(v)-len(u.suf)]
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("--rate %q is not bytes per second (e.g. 8MiB, 500k, 0 for unlimited)", s)
	}
	return int64(f * float64(mult)), nil
}

// limiter paces the copy to a number of bytes per second (a token bucket
// with a tenth of a second of burst), shared by the copy's goroutines. A
// nil limiter does not wait.
type limiter struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
}

func newLimiter(rate int64) *limiter {
	if rate <= 0 {
		return nil
	}
	return &limiter{rate: float64(rate), tokens: float64(rate) / 10, last: time.Now()}
}

// wait takes n bytes, sleeping until the bucket allows them.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*l.rate, l.rate/10)
	l.last = now
	l.tokens -= float64(n)
	d := time.Duration(-l.tokens / l.rate * float64(time.Second))
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RoundTrip is the longest round trip the mover made to one node: one
// command, or one pipeline of small commands (bounded by the copy's batch).
type RoundTrip struct {
	Node     string
	Took     time.Duration
	What     string // the command, and how many when pipelined
	Commands int
}

// copyStats are the counters of a copy, shared by its goroutines.
type copyStats struct {
	Mu      sync.Mutex
	keys    int64 // keys written to the target (a key copied again counts again)
	bytes   int64 // bytes of values written
	deleted int64 // keys deleted on the target (gone from the source)
	Chunked int64 // keys copied in chunks
	Patched int64 // elements of large keys written by member patches
	Whole   int64 // large keys compared whole under the hold after a size check
	read    int64 // bytes of the source read by comparisons and verifications (nothing written)
	longest map[string]RoundTrip
	started time.Time
	// The copies of changed small keys while served (unpaced): how fast
	// the target takes the queue's changes, the rate a hold is planned
	// with (holdPlan).
	tailKeys int64
	tailTime time.Duration
	// Round trips sent again after a lost connection (redo.go): each
	// node's identity when the copy first spoke to it ("" when it could
	// not be read), how many were sent again, and where to tell it.
	ident  map[string]string
	Redone int64
	say    func(string, ...any)
	said   map[string]bool // what noteOnce said
}

func newCopyStats() *copyStats {
	return &copyStats{longest: map[string]RoundTrip{}, ident: map[string]string{}, started: time.Now()}
}

func (s *copyStats) add(keys, bytes int) {
	s.Mu.Lock()
	s.keys += int64(keys)
	s.bytes += int64(bytes)
	s.Mu.Unlock()
}

// addRead counts bytes of the source read without a write: a
// comparison's or a verification's progress.
func (s *copyStats) addRead(n int) {
	s.Mu.Lock()
	s.read += int64(n)
	s.Mu.Unlock()
}

// MeasureTail records an unpaced copy of keys changed small keys that took
// d.
func (s *copyStats) MeasureTail(keys int, d time.Duration) {
	s.Mu.Lock()
	s.tailKeys += int64(keys)
	s.tailTime += d
	s.Mu.Unlock()
}

// tailRate is the changed small keys the copy took per second, unpaced,
// while the queue was served (0: none measured yet). Copies of fewer than
// tailSample keys are too short to time on their own: they count together.
func (s *copyStats) tailRate() float64 {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.tailKeys < tailSample || s.tailTime <= 0 {
		return 0
	}
	return float64(s.tailKeys) / s.tailTime.Seconds()
}

// tailSample is the fewest changed keys whose copy times the tail's rate.
const tailSample = 200

// readBytes is the bytes read by comparisons and verifications so far.
func (s *copyStats) readBytes() int64 {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.read
}

func (s *copyStats) Snapshot() (keys, bytes int64) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.keys, s.bytes
}

// RoundTrips returns the longest round trip to each node.
func (s *copyStats) RoundTrips() []RoundTrip {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	var out []RoundTrip
	for _, r := range s.longest {
		out = append(out, r)
	}
	return out
}

// do sends cmds to n in one round trip and records how long it took. A
// round trip that lost its connection is sent again when that is safe
// (redo.go).
func (s *copyStats) do(ctx context.Context, n *table.Node, cmds ...valkey.Completed) []valkey.ValkeyResult {
	rs, _ := s.send(ctx, n, cmds...)
	return rs
}

// send is do; redone: the round trip was sent more than once, and may
// have run partly the first time.
func (s *copyStats) send(ctx context.Context, n *table.Node, cmds ...valkey.Completed) (rs []valkey.ValkeyResult, redone bool) {
	var names []string
	for _, c := range cmds {
		if name := c.Commands()[0]; !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	what := strings.Join(names, "+")
	again := s.know(ctx, n) && mayRedo(names)
	if again {
		// valkey-go recycles a command once it is sent: these are kept
		// for a second send.
		for i := range cmds {
			cmds[i] = cmds[i].Pin()
		}
	}
	t0 := time.Now()
	rs = n.C.DoMulti(ctx, cmds...)
	d := time.Since(t0)
	s.Mu.Lock()
	if d > s.longest[n.Name].Took {
		s.longest[n.Name] = RoundTrip{Node: n.Name, Took: d, What: what, Commands: len(cmds)}
	}
	s.Mu.Unlock()
	if err := lost(rs); err != nil && again {
		return s.redo(ctx, n, cmds, rs, err)
	}
	return rs, false
}

// do1 is do for one command.
func (s *copyStats) do1(ctx context.Context, n *table.Node, cmd valkey.Completed) valkey.ValkeyResult {
	return s.do(ctx, n, cmd)[0]
}
