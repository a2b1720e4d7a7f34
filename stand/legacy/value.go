package legacy

import (
	"errors"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// Kind is the type of a normalized reply.
type Kind uint8

// The kinds of a normalized reply. RESP2 simple and bulk strings are both
// KindString; a nil bulk and a nil array are both KindNil.
const (
	KindNil Kind = iota
	KindString
	KindInt
	KindArray
	KindError
)

// Value is one reply as the client saw it, normalized for comparison.
type Value struct {
	Kind  Kind
	Str   string  // KindString: the string; KindError: the error text without a leading "ERR "
	Int   int64   // KindInt
	Array []Value // KindArray
}

// String renders the value as the seed writes replies: strings in quotes,
// integers bare, arrays in brackets, nil as nil, errors as (error) <text>.
func (v Value) String() string {
	var b strings.Builder
	v.write(&b)
	return b.String()
}

func (v Value) write(b *strings.Builder) {
	switch v.Kind {
	case KindNil:
		b.WriteString("nil")
	case KindString:
		b.WriteString(strconv.Quote(v.Str))
	case KindInt:
		b.WriteString(strconv.FormatInt(v.Int, 10))
	case KindError:
		b.WriteString("(error) ")
		b.WriteString(v.Str)
	case KindArray:
		b.WriteByte('[')
		for i, e := range v.Array {
			if i > 0 {
				b.WriteString(", ")
			}
			e.write(b)
		}
		b.WriteByte(']')
	}
}

// Equal reports whether two values are the same reply.
func (v Value) Equal(w Value) bool {
	if v.Kind != w.Kind || v.Str != w.Str || v.Int != w.Int || len(v.Array) != len(w.Array) {
		return false
	}
	for i := range v.Array {
		if !v.Array[i].Equal(w.Array[i]) {
			return false
		}
	}
	return true
}

// Err returns the error reply as a *ReplyError, or nil when
// the value is not an error.
func (v Value) Err() error {
	if v.Kind != KindError {
		return nil
	}
	return &ReplyError{Text: v.Str}
}

// ReplyError is an error reply of the server (or of the proxy).
type ReplyError struct {
	Text string // without a leading "ERR "
}

// Error returns the error text.
func (e *ReplyError) Error() string { return e.Text }

// Unwrap returns ErrRefused.
func (e *ReplyError) Unwrap() error { return ErrRefused }

// IsNoScript reports whether the reply is NOSCRIPT.
func (e *ReplyError) IsNoScript() bool { return strings.HasPrefix(e.Text, "NOSCRIPT") }

// fromResult normalizes a valkey-go result. An error is returned only when
// the result is not a reply at all (a connection error, a closed client).
func fromResult(r valkey.ValkeyResult) (Value, error) {
	if err := r.NonValkeyError(); err != nil {
		return Value{}, err
	}
	msg, _ := r.ToMessage() // a server error is normalized by fromMessage
	return fromMessage(msg)
}

// fromMessage normalizes one valkey-go message.
func fromMessage(m valkey.ValkeyMessage) (Value, error) {
	switch {
	case m.IsNil():
		return Value{Kind: KindNil}, nil
	case m.IsInt64():
		n, err := m.AsInt64()
		return Value{Kind: KindInt, Int: n}, err
	case m.IsString():
		s, err := m.ToString()
		return Value{Kind: KindString, Str: s}, err
	case m.IsArray():
		elems, err := m.ToArray()
		if err != nil {
			return Value{}, err
		}
		out := Value{Kind: KindArray, Array: make([]Value, len(elems))}
		for i, e := range elems {
			if out.Array[i], err = fromMessage(e); err != nil {
				return Value{}, err
			}
		}
		return out, nil
	}
	if err := m.Error(); err != nil {
		var ve *valkey.ValkeyError
		if errors.As(err, &ve) {
			return Value{Kind: KindError, Str: ve.Error()}, nil
		}
		return Value{}, err
	}
	return Value{}, ErrReply
}
