package fence

import (
	"context"
	"errors"
	"strconv"

	"github.com/valkey-io/valkey-go"
)

// Reply is a decoded RESP reply, enough for the fence.
type Reply struct {
	// Type is '+', '-', ':', '$' or '*', or '_' for a null.
	Type  byte
	Str   string  // simple, bulk and error text
	Int   int64   // integer
	Elems []Reply // array elements
	Null  bool    // a null (nil bulk or nil array)
}

// IsError reports whether the reply is an error reply.
func (r Reply) IsError() bool { return r.Type == '-' }

// Conn sends one command and returns its reply. An error reply is a Reply
// of Type '-', not an error; error is for transport failures.
type Conn interface {
	Do(ctx context.Context, args ...string) (Reply, error)
}

// FromValkey adapts a valkey-go client. valkey-go does not tell simple from
// bulk strings (both become '$'), strips the "ERR " prefix of error texts,
// and on RESP3 reports booleans as integers and doubles as bulk strings; a
// map is flattened to key, value pairs. None of that matters to the fence.
func FromValkey(c valkey.Client) Conn { return valkeyConn{c} }

type valkeyConn struct{ c valkey.Client }

func (v valkeyConn) Do(ctx context.Context, args ...string) (Reply, error) {
	if len(args) == 0 {
		return Reply{}, errors.New("fence: empty command")
	}
	res := v.c.Do(ctx, v.c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
	if err := res.NonValkeyError(); err != nil {
		return Reply{}, err
	}
	msg, err := res.ToMessage()
	if verr, ok := valkey.IsValkeyErr(err); ok {
		return Reply{Type: '-', Str: verr.Error()}, nil
	}
	return fromMessage(&msg), nil
}

// fromMessage converts one valkey-go message.
func fromMessage(m *valkey.ValkeyMessage) Reply {
	switch {
	case m.IsNil():
		return Reply{Type: '_', Null: true}
	case m.IsInt64():
		n, _ := m.AsInt64()
		return Reply{Type: ':', Int: n}
	case m.IsBool():
		b, _ := m.AsBool()
		if b {
			return Reply{Type: ':', Int: 1}
		}
		return Reply{Type: ':'}
	case m.IsFloat64():
		f, _ := m.AsFloat64()
		return Reply{Type: '$', Str: strconv.FormatFloat(f, 'g', -1, 64)}
	case m.IsArray():
		elems, _ := m.ToArray()
		out := Reply{Type: '*', Elems: make([]Reply, len(elems))}
		for i := range elems {
			out.Elems[i] = fromMessage(&elems[i])
		}
		return out
	case m.IsMap():
		kv, _ := m.AsMap()
		out := Reply{Type: '*'}
		for k, v := range kv {
			out.Elems = append(out.Elems, Reply{Type: '$', Str: k}, fromMessage(&v))
		}
		return out
	}
	s, _ := m.ToString()
	return Reply{Type: '$', Str: s}
}
