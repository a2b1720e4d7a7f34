package verify

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"
)

// side is one of the two executors.
type side int

const (
	scriptSide side = iota // wire 4: host steps, then EVAL of the body
	nativeSide             // EMQ.<TOKEN> with the same tail
)

func (s side) String() string {
	if s == scriptSide {
		return "script"
	}
	return "native"
}

// window is the server time, in ms, read before and after one step.
type window struct{ Lo, Hi int64 }

// stepResult is one executed step.
type stepResult struct {
	Op    Op
	Reply Reply
	Win   window
	Timed bool     // Win is set (verb and read calls)
	After Snapshot // the queue after a setup step (differential cases)
	Row   *Reply   // the call's row read right after it (replay)
}

// executor runs ops against the server on behalf of one side.
type executor struct {
	c      valkey.Client
	bodies map[string]string // token or read name -> script body
}

// serverTime reads TIME as ms: sec*1000 + floor(usec/1000).
func (e *executor) serverTime(ctx context.Context) (int64, error) {
	ss, err := e.c.Do(ctx, e.c.B().Time().Build()).AsStrSlice()
	if err != nil || len(ss) != 2 {
		return 0, fmt.Errorf("%w: TIME: %v %q", ErrServer, err, ss)
	}
	return timeMs(ss[0], ss[1])
}

// timeMs converts TIME's two strings to ms.
func timeMs(secText, usecText string) (int64, error) {
	sec, err1 := strconv.ParseInt(secText, 10, 64)
	usec, err2 := strconv.ParseInt(usecText, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: TIME replied %q %q", ErrServer, secText, usecText)
	}
	return sec*1000 + usec/1000, nil
}

// tickAfter polls the server clock until it has passed ms, so the windows
// of consecutive steps never share a millisecond.
func (e *executor) tickAfter(ctx context.Context, ms int64) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		now, err := e.serverTime(ctx)
		if err != nil {
			return err
		}
		if now > ms {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: server clock did not advance past %d", ErrServer, ms)
		}
	}
}

// do sends one command and types its reply.
func (e *executor) do(ctx context.Context, args ...string) (Reply, error) {
	return fromResult(e.c.Do(ctx, e.c.B().Arbitrary(args[0]).Args(args[1:]...).Build()))
}

// line is the command line of a verb or read op for side s on queue q.
func (e *executor) line(s side, q string, op Op) []string {
	switch {
	case op.isRead():
		// Reads pass through unchanged on both wires and run read-only.
		return append([]string{"EVAL_RO", e.bodies[op.Token]}, op.tail(q)...)
	case s == scriptSide:
		return append([]string{"EVAL", e.bodies[op.Token]}, op.tail(q)...)
	}
	return append([]string{"EMQ." + op.Token}, op.tail(q)...)
}

// paused is the connector's host step before a scripted claim: the pause
// flag read in its own round trip (EXISTS, as the contract defines paused).
func (e *executor) paused(ctx context.Context, q string) (bool, error) {
	n, err := e.c.Do(ctx, e.c.B().Exists().Key(queueKey(q)+"paused").Build()).AsInt64()
	if err != nil {
		return false, fmt.Errorf("%w: EXISTS paused: %v", ErrServer, err)
	}
	return n == 1, nil
}

// run executes one op for side s on queue q. Verb and read calls are timed:
// TIME before, TIME after, then the clock is let pass the window.
func (e *executor) run(ctx context.Context, s side, q string, op Op) (stepResult, error) {
	res := stepResult{Op: op}
	if op.Raw != nil {
		r, err := e.do(ctx, expandAll(op.Raw, q)...)
		res.Reply = r
		return res, err
	}
	lo, err := e.serverTime(ctx)
	if err != nil {
		return res, err
	}
	skip := false
	if s == scriptSide && op.Token == "CLAIM" {
		if skip, err = e.paused(ctx, q); err != nil {
			return res, err
		}
	}
	if skip {
		res.Reply = Reply{Kind: KindHostSkip}
	} else if res.Reply, err = e.do(ctx, e.line(s, q, op)...); err != nil {
		return res, err
	}
	hi, err := e.serverTime(ctx)
	if err != nil {
		return res, err
	}
	res.Win, res.Timed = window{lo, hi}, true
	return res, e.tickAfter(ctx, hi)
}

// runExact runs the script call on qa, the native call on qb and a TIME in
// one MULTI/EXEC (after the script side's host step, outside the
// transaction); the atNow ops run first in the same transaction, on qa and
// then on qb. It returns both step results sharing one window, and the
// TIME read inside the transaction.
func (e *executor) runExact(ctx context.Context, qa, qb string, op Op, atNow []Op) (a, b stepResult, inTx int64, err error) {
	a, b = stepResult{Op: op, Timed: true}, stepResult{Op: op, Timed: true}
	lo, err := e.serverTime(ctx)
	if err != nil {
		return a, b, 0, err
	}
	if op.Token == "CLAIM" {
		skip, err := e.paused(ctx, qa)
		if err != nil || skip {
			return a, b, 0, fmt.Errorf("%w: lease-exact case on a paused queue", ErrServer)
		}
	}
	build := func(args []string) valkey.Completed {
		return e.c.B().Arbitrary(args[0]).Args(args[1:]...).Build()
	}
	cmds := valkey.Commands{e.c.B().Multi().Build()}
	for _, q := range []string{qa, qb} {
		for _, s := range atNow {
			cmds = append(cmds, build(expandAll(s.Raw, q)))
		}
	}
	cmds = append(cmds, build(e.line(scriptSide, qa, op)), build(e.line(nativeSide, qb, op)),
		e.c.B().Time().Build(), e.c.B().Exec().Build())
	var res []valkey.ValkeyResult
	err = e.c.Dedicated(func(d valkey.DedicatedClient) error {
		res = d.DoMulti(ctx, cmds...)
		return nil
	})
	if err != nil {
		return a, b, 0, fmt.Errorf("%w: MULTI/EXEC: %v", ErrServer, err)
	}
	execReply, err := fromResult(res[len(res)-1])
	if err != nil {
		return a, b, 0, err
	}
	n := 2 * len(atNow)
	if execReply.Kind != KindArray || len(execReply.Elems) != n+3 {
		return a, b, 0, fmt.Errorf("%w: EXEC replied %s", ErrServer, execReply)
	}
	for i, r := range execReply.Elems[:n] {
		if r.IsError() {
			return a, b, 0, fmt.Errorf("%w: %s in the transaction replied %s", ErrServer, atNow[i%len(atNow)], r)
		}
	}
	a.Reply, b.Reply = execReply.Elems[n], execReply.Elems[n+1]
	tr := execReply.Elems[n+2]
	if tr.Kind != KindArray || len(tr.Elems) != 2 {
		return a, b, 0, fmt.Errorf("%w: TIME in EXEC replied %s", ErrServer, tr)
	}
	inTx, err = timeMs(tr.Elems[0].Str, tr.Elems[1].Str)
	if err != nil {
		return a, b, 0, err
	}
	hi, err := e.serverTime(ctx)
	if err != nil {
		return a, b, 0, err
	}
	a.Win, b.Win = window{lo, hi}, window{lo, hi}
	return a, b, inTx, e.tickAfter(ctx, hi)
}
