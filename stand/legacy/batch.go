package legacy

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"
)

// Batch queues script calls and sends them in one round trip (Client.Batch)
// or wrapped in MULTI/EXEC (Client.Tx). Claims keep their own pause read:
// before the lines are sent, one round trip reads the pause flag of every
// queue the batch claims from, and a claim on a paused queue is answered
// empty without being sent. A Batch is used by one goroutine and sent once.
type Batch struct {
	c     *Client
	tx    bool
	calls []queued
}

type queued struct {
	name  string
	keys  []string
	vals  []string
	claim string // the queue, for a claim
}

// Result is one call's outcome in a Batch.
type Result struct {
	Op       string // script name
	Reply    Value  // the reply; for a skipped claim an empty array
	Skipped  bool   // a claim on a paused queue: nothing was sent
	Reloaded bool   // the line got NOSCRIPT and was sent again after SCRIPT LOAD
}

// Batch starts a pipeline: its calls are sent with one DoMulti.
func (c *Client) Batch() *Batch { return &Batch{c: c} }

// Tx starts a transaction: its calls are sent as MULTI, the lines, EXEC on a
// dedicated connection. Lines that get NOSCRIPT inside EXEC are sent again,
// after SCRIPT LOAD, in a second MULTI/EXEC of their own.
func (c *Client) Tx() *Batch { return &Batch{c: c, tx: true} }

// Len returns the number of queued calls.
func (b *Batch) Len() int { return len(b.calls) }

// Eval queues a script call with any keys and values.
func (b *Batch) Eval(name string, keys, vals []string) *Batch {
	b.calls = append(b.calls, queued{name: name, keys: keys, vals: vals})
	return b
}

// Enqueue queues Client.Enqueue.
func (b *Batch) Enqueue(q, id, payload string) *Batch {
	return b.Eval(ScriptEnqueue, []string{JobKey(q, id), Key(q, "pending")}, []string{id, payload})
}

// Claim queues Client.Claim.
func (b *Batch) Claim(q string, leaseMs int64) *Batch {
	b.calls = append(b.calls, queued{name: ScriptClaim, keys: claimKeys(q), vals: []string{itoa(leaseMs)}, claim: q})
	return b
}

// Extend queues Client.Extend.
func (b *Batch) Extend(q, id string, leaseMs int64) *Batch {
	return b.Eval(ScriptExtend, []string{Key(q, "active"), JobKey(q, id)}, []string{id, itoa(leaseMs)})
}

// Complete queues Client.Complete.
func (b *Batch) Complete(q, id string) *Batch {
	return b.Eval(ScriptComplete, []string{Key(q, "active"), JobKey(q, id), Key(q, "done")}, []string{id})
}

// Fail queues Client.Fail.
func (b *Batch) Fail(q, id, errText string, maxAttempts, backoffMs int64) *Batch {
	keys := []string{Key(q, "active"), JobKey(q, id), Key(q, "delayed"), Key(q, "dead")}
	return b.Eval(ScriptFail, keys, []string{id, errText, itoa(maxAttempts), itoa(backoffMs)})
}

// Retry queues Client.Retry.
func (b *Batch) Retry(q, id string) *Batch {
	return b.Eval(ScriptRetry, []string{Key(q, "dead"), JobKey(q, id), Key(q, "pending")}, []string{id})
}

// Cancel queues Client.Cancel.
func (b *Batch) Cancel(q, id string) *Batch {
	return b.Eval(ScriptCancel, []string{Key(q, "pending"), Key(q, "delayed"), JobKey(q, id)}, []string{id})
}

// Promote queues Client.Promote.
func (b *Batch) Promote(q string, limit int64) *Batch {
	return b.Eval(ScriptPromote, []string{Key(q, "delayed"), Key(q, "pending")}, []string{itoa(limit)})
}

// Reap queues Client.Reap.
func (b *Batch) Reap(q string, limit, maxAttempts int64) *Batch {
	return b.Eval(ScriptReap, []string{Key(q, "active"), Key(q, "pending"), Key(q, "dead")}, []string{itoa(limit), itoa(maxAttempts)})
}

// Pause queues Client.Pause.
func (b *Batch) Pause(q string) *Batch { return b.Eval(ScriptPause, []string{Key(q, "paused")}, nil) }

// Resume queues Client.Resume.
func (b *Batch) Resume(q string) *Batch { return b.Eval(ScriptResume, []string{Key(q, "paused")}, nil) }

// Remove queues Client.Remove.
func (b *Batch) Remove(q, id string) *Batch {
	keys := []string{JobKey(q, id), Key(q, "pending"), Key(q, "delayed"), Key(q, "active"), Key(q, "done"), Key(q, "dead")}
	return b.Eval(ScriptRemove, keys, []string{id})
}

// Stats queues Client.Stats.
func (b *Batch) Stats(q string) *Batch { return b.Eval(ScriptStats, statsKeys(q), nil) }

// Peek queues Client.Peek.
func (b *Batch) Peek(q, id string) *Batch { return b.Eval(ScriptPeek, []string{JobKey(q, id)}, nil) }

// Exec sends the batch and returns one Result per call, in order. An error
// means some reply did not arrive (connection, fence, closed client); error
// replies are Results.
func (b *Batch) Exec(ctx context.Context) ([]Result, error) {
	c := b.c
	what := "pipeline"
	if b.tx {
		what = "transaction"
	}
	ss := make([]*script, len(b.calls))
	for i, q := range b.calls {
		s, ok := c.scripts[q.name]
		if !ok {
			return nil, fmt.Errorf("%w: unknown script %q", ErrScript, q.name)
		}
		ss[i] = s
	}
	vc, release, err := c.acquire()
	if err != nil {
		return nil, c.failure(what, err)
	}
	defer release()

	out := make([]Result, len(b.calls))
	paused, err := b.readPaused(ctx, vc)
	if err != nil {
		return nil, c.failure(what, err)
	}
	var send []int // indexes of the calls that are sent
	for i, q := range b.calls {
		out[i].Op = q.name
		if q.claim != "" && paused[q.claim] {
			out[i].Skipped = true
			out[i].Reply = Value{Kind: KindArray}
			continue
		}
		send = append(send, i)
	}
	lines := make([][]string, len(b.calls))
	for _, i := range send {
		lines[i] = ss[i].line(b.calls[i].keys, b.calls[i].vals)
	}
	if err := b.round(ctx, vc, send, lines, out); err != nil {
		return nil, c.failure(what, err)
	}

	// NOSCRIPT: load each missing script once, send those lines again.
	var again []int
	var load []*script
	seen := map[string]bool{}
	for _, i := range send {
		if isNoScript(out[i].Reply) {
			again = append(again, i)
			if !seen[ss[i].name] {
				seen[ss[i].name] = true
				load = append(load, ss[i])
			}
		}
	}
	if len(again) > 0 {
		if err := c.load(ctx, vc, load); err != nil {
			return nil, c.failure(what, err)
		}
		if err := b.round(ctx, vc, again, lines, out); err != nil {
			return nil, c.failure(what, err)
		}
		for _, i := range again {
			out[i].Reloaded = true
		}
	}
	for _, i := range send {
		c.record(Call{Op: out[i].Op, Line: lines[i], Reply: out[i].Reply, Reloaded: out[i].Reloaded})
	}
	return out, nil
}

// readPaused reads the pause flag of every queue the batch claims from, in
// one round trip of its own.
func (b *Batch) readPaused(ctx context.Context, vc valkey.Client) (map[string]bool, error) {
	var queues []string
	paused := map[string]bool{}
	for _, q := range b.calls {
		if q.claim != "" {
			if _, ok := paused[q.claim]; !ok {
				paused[q.claim] = false
				queues = append(queues, q.claim)
			}
		}
	}
	if len(queues) == 0 {
		return paused, nil
	}
	cmds := make(valkey.Commands, len(queues))
	for i, q := range queues {
		cmds[i] = build(vc.B(), pausedLine(q))
	}
	for i, r := range vc.DoMulti(ctx, cmds...) {
		v, err := fromResult(r)
		if err != nil {
			return nil, err
		}
		b.c.record(Call{Op: "paused", Line: pausedLine(queues[i]), Reply: v})
		if paused[queues[i]], err = decodeBool("paused", v); err != nil {
			return nil, err
		}
	}
	return paused, nil
}

// round sends the lines at idx (as a pipeline, or as MULTI/EXEC) and stores
// their replies in out.
func (b *Batch) round(ctx context.Context, vc valkey.Client, idx []int, lines [][]string, out []Result) error {
	if len(idx) == 0 {
		return nil
	}
	if !b.tx {
		cmds := make(valkey.Commands, len(idx))
		for k, i := range idx {
			cmds[k] = build(vc.B(), lines[i])
		}
		for k, r := range vc.DoMulti(ctx, cmds...) {
			v, err := fromResult(r)
			if err != nil {
				return err
			}
			out[idx[k]].Reply = v
		}
		return nil
	}
	return vc.Dedicated(func(dc valkey.DedicatedClient) error {
		cmds := make(valkey.Commands, 0, len(idx)+2)
		cmds = append(cmds, dc.B().Multi().Build())
		for _, i := range idx {
			cmds = append(cmds, build(dc.B(), lines[i]))
		}
		cmds = append(cmds, dc.B().Exec().Build())
		rs := make([]Value, len(cmds))
		for k, r := range dc.DoMulti(ctx, cmds...) {
			v, err := fromResult(r)
			if err != nil {
				return err
			}
			rs[k] = v
		}
		if rs[0].Kind == KindError {
			return fmt.Errorf("legacy: MULTI: %w", rs[0].Err())
		}
		exec := rs[len(rs)-1]
		for k, i := range idx {
			switch {
			case rs[k+1].Kind == KindError: // refused when queued
				out[i].Reply = rs[k+1]
			case exec.Kind == KindArray && len(exec.Array) == len(idx):
				out[i].Reply = exec.Array[k]
			default: // EXECABORT or a discarded transaction
				out[i].Reply = exec
			}
		}
		return nil
	})
}

// Bool decodes the reply of Enqueue, Complete, Retry, Cancel, Pause, Resume
// or Remove.
func (r Result) Bool() (bool, error) { return decodeBool(r.Op, r.Reply) }

// Int decodes the reply of Extend, Fail, Promote or Reap.
func (r Result) Int() (int64, error) { return decodeInt(r.Op, r.Reply) }

// Job decodes the reply of Claim.
func (r Result) Job() (job Job, empty bool, err error) { return decodeJob(r.Op, r.Reply) }

// Stats decodes the reply of Stats.
func (r Result) Stats() ([6]int64, error) { return decodeStats(r.Op, r.Reply) }

// Row decodes the reply of Peek.
func (r Result) Row() (row Row, found bool, err error) { return decodeRow(r.Op, r.Reply) }
