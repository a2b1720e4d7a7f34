package discovery

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/stand/node"
)

// EnvMeasureLoss turns on TestFailoverLossIntegration, a measurement (two
// failovers per server, about a minute), printed in the test log.
const EnvMeasureLoss = "EMQ_MEASURE_FAILOVER_LOSS"

// Shape of the measurement: writers at full speed, each sending batches
// of single-element RPUSHes to a list of its own on one pipeline.
const (
	lossWriters   = 4
	lossBatch     = 64
	lossWarmup    = 500000 // acknowledged writes before the SIGKILL
	lossWaitMilli = 1000   // WAIT 1 <timeout>
	// lossStall is how long the replica is stopped (SIGSTOP) right before
	// the SIGKILL in the stalled runs: a replica that lags (a busy core, a
	// slow disk, a network hiccup) when the primary dies. It is the length
	// of the scenario, not a synchronisation; it stays well under the
	// sentinels' down-after, so the replica remains eligible.
	lossStall = 300 * time.Millisecond
)

// TestFailoverLossIntegration measures how many acknowledged writes a
// SIGKILL failover loses when a plain valkey-go client writes straight to
// the primary (no proxy): without WAIT, and with `WAIT 1 <timeout>` after
// each batch on the batch's connection (a batch then counts as
// acknowledged only when WAIT answers at least 1), each with a replica
// that keeps up and with one stalled for lossStall when the primary dies.
// It asserts that no write confirmed by WAIT is lost and reports the rest.
func TestFailoverLossIntegration(t *testing.T) {
	if os.Getenv(EnvMeasureLoss) == "" {
		t.Skipf("a measurement: set %s=1 to run it", EnvMeasureLoss)
	}
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		for _, stall := range []bool{false, true} {
			for _, wait := range []bool{false, true} {
				name := "no WAIT"
				if wait {
					name = "WAIT 1 " + strconv.Itoa(lossWaitMilli)
				}
				if stall {
					name += ", replica stalled " + lossStall.String()
				}
				t.Run(name, func(t *testing.T) { measureLoss(t, srv, name, wait, stall) })
			}
		}
	})
}

// writer is one writer's account: the sequence numbers the primary
// acknowledged, and what was not confirmed.
type writer struct {
	key         string
	acked       []int64
	unconfirmed int // WAIT answered 0: the batch may or may not be on the replica
	failed      int // no reply (the primary died): the write may have been applied
	err         error
}

func measureLoss(t *testing.T, srv node.Server, name string, wait, stall bool) {
	h := moduleStand(t, srv)
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{h.Primary.Addr}, DisableCache: true, DisableRetry: true, ForceSingleClient: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	var total atomic.Int64
	writers := make([]*writer, lossWriters)
	var wg sync.WaitGroup
	started := time.Now()
	for i := range writers {
		w := &writer{key: fmt.Sprintf("loss:{w%d}", i)}
		writers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(client, wait, &total)
		}()
	}
	waitUntil(t, 60*time.Second, "warm-up writes", func() bool { return total.Load() >= lossWarmup })
	rate := float64(total.Load()) / time.Since(started).Seconds()
	if stall {
		if err := h.Replica.Freeze(); err != nil {
			t.Fatal(err)
		}
		<-time.After(lossStall)
	}
	if err := h.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if stall {
		if err := h.Replica.Thaw(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	promoted, err := h.WaitPromoted(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	var acked, lost, unconfirmed, failed int
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pc := promoted.Client(t)
	for _, w := range writers {
		have, err := pc.Do(ctx, pc.B().Lrange().Key(w.key).Start(0).Stop(-1).Build()).AsIntSlice()
		if err != nil {
			t.Fatalf("LRANGE %s on the promoted node: %v", w.key, err)
		}
		present := make(map[int64]bool, len(have))
		for _, s := range have {
			present[s] = true
		}
		for _, s := range w.acked {
			if !present[s] {
				lost++
			}
		}
		acked += len(w.acked)
		unconfirmed += w.unconfirmed
		failed += w.failed
	}
	t.Logf("%s, %s: %d writers x batches of %d at %.0f acknowledged writes/s; at the SIGKILL: %d acknowledged, %d of them lost on the promoted replica (%.3f%%); %d not confirmed by WAIT, %d without a reply",
		srv.Name, name, lossWriters, lossBatch, rate, acked, lost, 100*float64(lost)/float64(max(acked, 1)), unconfirmed, failed)
	if acked < lossWarmup {
		t.Fatalf("%d acknowledged writes, fewer than the %d counted before the kill", acked, lossWarmup)
	}
	if wait && lost != 0 {
		t.Fatalf("%d writes confirmed by WAIT 1 are missing on the promoted replica", lost)
	}
}

// run writes batches until the first one that fails.
func (w *writer) run(c valkey.Client, wait bool, total *atomic.Int64) {
	ctx := context.Background()
	var seq int64
	cmds := make(valkey.Commands, 0, lossBatch+1)
	for {
		cmds = cmds[:0]
		first := seq
		for range lossBatch {
			seq++
			cmds = append(cmds, c.B().Rpush().Key(w.key).Element(strconv.FormatInt(seq, 10)).Build())
		}
		if wait {
			cmds = append(cmds, c.B().Wait().Numreplicas(1).Timeout(lossWaitMilli).Build())
		}
		res := c.DoMulti(ctx, cmds...)
		if wait {
			n, err := res[lossBatch].AsInt64()
			switch {
			case err != nil:
				w.failed += lossBatch
				w.err = err
				return
			case n < 1:
				w.unconfirmed += lossBatch
			default:
				for s := first + 1; s <= seq; s++ {
					w.acked = append(w.acked, s)
				}
				total.Add(lossBatch)
			}
			continue
		}
		for i, r := range res {
			if err := r.Error(); err != nil {
				w.failed += lossBatch - i
				w.err = err
				return
			}
			w.acked = append(w.acked, first+int64(i)+1)
			total.Add(1)
		}
	}
}
