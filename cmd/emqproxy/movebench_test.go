package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/legacy"
)

// TestQueueMoveBench measures a move of a queue of 100k jobs in mixed states
// (pending, active, done, delayed) with one proxy running: the hold (hold to
// flip) and the copy rate. Opt-in: EMQ_MOVE_BENCH=1 (about a minute); not
// part of make test. The variable is not EMQPROXY_-prefixed: the proxies
// the test starts inherit it, and refuse a variable that names no key.
func TestQueueMoveBench(t *testing.T) {
	if os.Getenv("EMQ_MOVE_BENCH") == "" {
		t.Skip("set EMQ_MOVE_BENCH=1 to measure a move of 100k jobs")
	}
	s := startMoveStand(t, "")
	ctx := context.Background()
	const jobs = 100_000
	states := []string{"pending", "active", "done", "delayed"}
	for lo := 0; lo < jobs; lo += 1000 {
		var cmds valkey.Commands
		for i := lo; i < lo+1000; i++ {
			id := fmt.Sprintf("J%07d", i)
			st := states[i%len(states)]
			cmds = append(cmds,
				s.src.B().Hset().Key(legacy.JobKey("billing", id)).FieldValue().FieldValue("state", st).
					FieldValue("attempts", "1").FieldValue("payload", "payload of "+id).Build(),
				s.src.B().Zadd().Key(legacy.Key("billing", st)).ScoreMember().ScoreMember(float64(i), id).Build())
		}
		for _, r := range s.src.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := s.proxy(t, "proxy1")
	waitRegistered(t, s.src, 1)
	_ = p
	t0 := time.Now()
	out, err := s.run(t, "move", "billing", "--to", "module-a")
	if err != nil {
		t.Fatal(err)
	}
	total := time.Since(t0)
	m := regexp.MustCompile(`held for (\S+)`).FindStringSubmatch(out)
	keys := jobs + len(states)
	t.Logf("moved %d keys in %v (process included): %.0f keys/s; hold %s", keys, total, float64(keys)/total.Seconds(), m[1])
}
