package legacy

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"
)

// Eval sends one script call as the connector does (EVALSHA line, NOSCRIPT →
// SCRIPT LOAD once → the same line again) and returns the reply as the
// client saw it. An error reply is a Value of KindError, not an error; the
// error is set only when no reply arrived (connection, fence, closed).
// Tests use it for calls the typed operations do not make (bad shapes).
func (c *Client) Eval(ctx context.Context, name string, keys, vals []string) (Value, error) {
	s, ok := c.scripts[name]
	if !ok {
		return Value{}, fmt.Errorf("%w: unknown script %q", ErrScript, name)
	}
	vc, release, err := c.acquire()
	if err != nil {
		return Value{}, c.failure(name, err)
	}
	defer release()
	line := s.line(keys, vals)
	v, err := fromResult(vc.Do(ctx, build(vc.B(), line)))
	if err != nil {
		return Value{}, c.failure(name, err)
	}
	reloaded := isNoScript(v)
	if reloaded {
		if err := c.load(ctx, vc, []*script{s}); err != nil {
			return Value{}, c.failure(name, err)
		}
		if v, err = fromResult(vc.Do(ctx, build(vc.B(), line))); err != nil {
			return Value{}, c.failure(name, err)
		}
	}
	c.record(Call{Op: name, Line: line, Reply: v, Reloaded: reloaded})
	return v, nil
}

// Do sends one plain command on the client's connection and returns its
// reply, recorded with Op "do". An error reply is a Value of KindError.
func (c *Client) Do(ctx context.Context, args ...string) (Value, error) {
	if len(args) == 0 {
		return Value{}, fmt.Errorf("%w: empty command", ErrReply)
	}
	vc, release, err := c.acquire()
	if err != nil {
		return Value{}, c.failure(args[0], err)
	}
	defer release()
	v, err := fromResult(vc.Do(ctx, build(vc.B(), args)))
	if err != nil {
		return Value{}, c.failure(args[0], err)
	}
	c.record(Call{Op: "do", Line: args, Reply: v})
	return v, nil
}

// build makes a fresh valkey-go command for a line (valkey-go recycles a
// command once it is answered, so a resent line is built again). A script
// line is built as EVALSHA sha numkeys keys values.
func build(b valkey.Builder, line []string) valkey.Completed {
	return b.Arbitrary(line[0]).Args(line[1:]...).Build()
}

// load sends SCRIPT LOAD <body> once for each script and checks the sha the
// server answers.
func (c *Client) load(ctx context.Context, vc valkey.Client, ss []*script) error {
	cmds := make(valkey.Commands, len(ss))
	for i, s := range ss {
		cmds[i] = vc.B().ScriptLoad().Script(string(s.body)).Build()
	}
	for i, r := range vc.DoMulti(ctx, cmds...) {
		v, err := fromResult(r)
		if err != nil {
			return err
		}
		if v.Kind == KindError {
			return fmt.Errorf("%w: SCRIPT LOAD %s: %w", ErrScript, ss[i].name, v.Err())
		}
		if v.Kind != KindString || v.Str != ss[i].sha {
			return fmt.Errorf("%w: SCRIPT LOAD %s answered %s, want %s", ErrScript, ss[i].name, v, ss[i].sha)
		}
	}
	return nil
}

func isNoScript(v Value) bool {
	if v.Kind != KindError {
		return false
	}
	re := &ReplyError{Text: v.Str}
	return re.IsNoScript()
}
