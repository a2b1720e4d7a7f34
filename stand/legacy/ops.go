package legacy

import (
	"context"
	"fmt"
	"strconv"
)

// Job is a claimed job: CLAIM's [id, payload, attempts].
type Job struct {
	ID       string
	Payload  string
	Attempts int64
}

// Row is a job row as peek answers it: [state, attempts, payload]. A field
// the row lacks (peek answers nil) is "" (Attempts 0).
type Row struct {
	State    string
	Attempts int64
	Payload  string
}

// Enqueue adds a job: true when the row is new, false when it existed.
func (c *Client) Enqueue(ctx context.Context, q, id, payload string) (bool, error) {
	return c.evalBool(ctx, ScriptEnqueue, []string{JobKey(q, id), Key(q, "pending")}, id, payload)
}

// Claim reads the pause flag in a round trip of its own and, when the queue
// is not paused, claims the lowest pending job with a lease of leaseMs. It
// answers empty (and sends no script) when the queue is paused or has no
// pending job.
func (c *Client) Claim(ctx context.Context, q string, leaseMs int64) (job Job, empty bool, err error) {
	paused, err := c.Paused(ctx, q)
	if err != nil {
		return Job{}, false, err
	}
	if paused {
		return Job{}, true, nil
	}
	v, err := c.Eval(ctx, ScriptClaim, claimKeys(q), []string{itoa(leaseMs)})
	if err != nil {
		return Job{}, false, err
	}
	return decodeJob(ScriptClaim, v)
}

// Paused reads the pause flag as Claim does: EXISTS emq:{q}:paused, recorded
// with Op "paused".
func (c *Client) Paused(ctx context.Context, q string) (bool, error) {
	line := pausedLine(q)
	vc, release, err := c.acquire()
	if err != nil {
		return false, c.failure("paused", err)
	}
	defer release()
	v, err := fromResult(vc.Do(ctx, build(vc.B(), line)))
	if err != nil {
		return false, c.failure("paused", err)
	}
	c.record(Call{Op: "paused", Line: line, Reply: v})
	return decodeBool("paused", v)
}

// Extend renews an active job's lease: the new deadline in ms, or 0 when the
// job is not active.
func (c *Client) Extend(ctx context.Context, q, id string, leaseMs int64) (int64, error) {
	return c.evalInt(ctx, ScriptExtend, []string{Key(q, "active"), JobKey(q, id)}, id, itoa(leaseMs))
}

// Complete marks an active job done: false when it is not active.
func (c *Client) Complete(ctx context.Context, q, id string) (bool, error) {
	return c.evalBool(ctx, ScriptComplete, []string{Key(q, "active"), JobKey(q, id), Key(q, "done")}, id)
}

// Fail records a failure of an active job: the run-at ms when it was
// delayed for another attempt, 0 when it died, -1 when it was not active.
func (c *Client) Fail(ctx context.Context, q, id, errText string, maxAttempts, backoffMs int64) (int64, error) {
	keys := []string{Key(q, "active"), JobKey(q, id), Key(q, "delayed"), Key(q, "dead")}
	return c.evalInt(ctx, ScriptFail, keys, id, errText, itoa(maxAttempts), itoa(backoffMs))
}

// Retry moves a dead job back to pending: false when it is not dead.
func (c *Client) Retry(ctx context.Context, q, id string) (bool, error) {
	return c.evalBool(ctx, ScriptRetry, []string{Key(q, "dead"), JobKey(q, id), Key(q, "pending")}, id)
}

// Cancel cancels a pending or delayed job: false when it is neither.
func (c *Client) Cancel(ctx context.Context, q, id string) (bool, error) {
	return c.evalBool(ctx, ScriptCancel, []string{Key(q, "pending"), Key(q, "delayed"), JobKey(q, id)}, id)
}

// Promote moves up to limit due delayed jobs to pending: the count moved.
func (c *Client) Promote(ctx context.Context, q string, limit int64) (int64, error) {
	return c.evalInt(ctx, ScriptPromote, []string{Key(q, "delayed"), Key(q, "pending")}, itoa(limit))
}

// Reap takes back up to limit jobs whose lease expired: the count reaped.
func (c *Client) Reap(ctx context.Context, q string, limit, maxAttempts int64) (int64, error) {
	keys := []string{Key(q, "active"), Key(q, "pending"), Key(q, "dead")}
	return c.evalInt(ctx, ScriptReap, keys, itoa(limit), itoa(maxAttempts))
}

// Pause pauses a queue: true when newly paused.
func (c *Client) Pause(ctx context.Context, q string) (bool, error) {
	return c.evalBool(ctx, ScriptPause, []string{Key(q, "paused")})
}

// Resume resumes a queue: true when it was paused.
func (c *Client) Resume(ctx context.Context, q string) (bool, error) {
	return c.evalBool(ctx, ScriptResume, []string{Key(q, "paused")})
}

// Remove deletes a job's row and its id from every set: true when anything
// was removed.
func (c *Client) Remove(ctx context.Context, q, id string) (bool, error) {
	keys := []string{JobKey(q, id), Key(q, "pending"), Key(q, "delayed"), Key(q, "active"), Key(q, "done"), Key(q, "dead")}
	return c.evalBool(ctx, ScriptRemove, keys, id)
}

// Stats reads a queue's counts: pending, delayed, active, done, dead, paused (0/1).
func (c *Client) Stats(ctx context.Context, q string) ([6]int64, error) {
	v, err := c.Eval(ctx, ScriptStats, statsKeys(q), nil)
	if err != nil {
		return [6]int64{}, err
	}
	return decodeStats(ScriptStats, v)
}

// Peek reads a job's row: found is false when there is no row.
func (c *Client) Peek(ctx context.Context, q, id string) (row Row, found bool, err error) {
	v, err := c.Eval(ctx, ScriptPeek, []string{JobKey(q, id)}, nil)
	if err != nil {
		return Row{}, false, err
	}
	return decodeRow(ScriptPeek, v)
}

func (c *Client) evalBool(ctx context.Context, name string, keys []string, vals ...string) (bool, error) {
	v, err := c.Eval(ctx, name, keys, vals)
	if err != nil {
		return false, err
	}
	return decodeBool(name, v)
}

func (c *Client) evalInt(ctx context.Context, name string, keys []string, vals ...string) (int64, error) {
	v, err := c.Eval(ctx, name, keys, vals)
	if err != nil {
		return 0, err
	}
	return decodeInt(name, v)
}

func claimKeys(q string) []string { return []string{Key(q, "pending"), Key(q, "active")} }

func statsKeys(q string) []string {
	return []string{Key(q, "pending"), Key(q, "delayed"), Key(q, "active"), Key(q, "done"), Key(q, "dead"), Key(q, "paused")}
}

func pausedLine(q string) []string { return []string{"EXISTS", Key(q, "paused")} }

// refused turns an error reply into an error naming the operation.
func refused(op string, v Value) error {
	if err := v.Err(); err != nil {
		return fmt.Errorf("legacy: %s: %w", op, err)
	}
	return fmt.Errorf("%w: %s answered %s", ErrReply, op, v)
}

func decodeInt(op string, v Value) (int64, error) {
	if v.Kind != KindInt {
		return 0, refused(op, v)
	}
	return v.Int, nil
}

func decodeBool(op string, v Value) (bool, error) {
	n, err := decodeInt(op, v)
	if err != nil {
		return false, err
	}
	if n != 0 && n != 1 {
		return false, fmt.Errorf("%w: %s answered %d", ErrReply, op, n)
	}
	return n == 1, nil
}

func decodeJob(op string, v Value) (Job, bool, error) {
	if v.Kind != KindArray {
		return Job{}, false, refused(op, v)
	}
	if len(v.Array) == 0 {
		return Job{}, true, nil
	}
	a := v.Array
	if len(a) != 3 || a[0].Kind != KindString || a[1].Kind != KindString || a[2].Kind != KindInt {
		return Job{}, false, fmt.Errorf("%w: %s answered %s", ErrReply, op, v)
	}
	return Job{ID: a[0].Str, Payload: a[1].Str, Attempts: a[2].Int}, false, nil
}

func decodeStats(op string, v Value) ([6]int64, error) {
	var out [6]int64
	if v.Kind != KindArray {
		return out, refused(op, v)
	}
	if len(v.Array) != 6 {
		return out, fmt.Errorf("%w: %s answered %s", ErrReply, op, v)
	}
	for i, e := range v.Array {
		if e.Kind != KindInt {
			return out, fmt.Errorf("%w: %s answered %s", ErrReply, op, v)
		}
		out[i] = e.Int
	}
	return out, nil
}

func decodeRow(op string, v Value) (Row, bool, error) {
	if v.Kind != KindArray {
		return Row{}, false, refused(op, v)
	}
	if len(v.Array) == 0 {
		return Row{}, false, nil
	}
	if len(v.Array) != 3 {
		return Row{}, false, fmt.Errorf("%w: %s answered %s", ErrReply, op, v)
	}
	var f [3]string
	for i, e := range v.Array {
		switch e.Kind {
		case KindString:
			f[i] = e.Str
		case KindNil:
		default:
			return Row{}, false, fmt.Errorf("%w: %s answered %s", ErrReply, op, v)
		}
	}
	row := Row{State: f[0], Payload: f[2]}
	if f[1] != "" {
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Row{}, false, fmt.Errorf("%w: %s answered attempts %q", ErrReply, op, f[1])
		}
		row.Attempts = n
	}
	return row, true, nil
}
