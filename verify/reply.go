package verify

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// ReplyKind is the RESP2 type of a reply, as a script's client sees it.
type ReplyKind int

// The reply kinds. HostSkip is not a server reply: it records that the host
// skipped the call (CLAIM on a paused queue, wire 4).
const (
	KindNil ReplyKind = iota
	KindInt
	KindBulk
	KindStatus
	KindError
	KindArray
	KindHostSkip
)

// Reply is one typed reply. valkey-go reads a RESP2 nil bulk ($-1) and a
// nil array (*-1) alike, so both are KindNil; no reply of the contract is a
// nil array.
type Reply struct {
	Kind  ReplyKind
	Int   int64
	Str   string // bulk, status or error text (exact, prefix included)
	Elems []Reply
}

// Constructors used by the case tables.
func rInt(n int64) *Reply    { return &Reply{Kind: KindInt, Int: n} }
func rBulk(s string) Reply   { return Reply{Kind: KindBulk, Str: s} }
func rErr(s string) *Reply   { return &Reply{Kind: KindError, Str: s} }
func rArr(e ...Reply) *Reply { return &Reply{Kind: KindArray, Elems: append([]Reply{}, e...)} }
func rIntV(n int64) Reply    { return Reply{Kind: KindInt, Int: n} }
func rNilV() Reply           { return Reply{Kind: KindNil} }
func rInts(ns ...int64) *Reply {
	r := &Reply{Kind: KindArray, Elems: []Reply{}}
	for _, n := range ns {
		r.Elems = append(r.Elems, rIntV(n))
	}
	return r
}

// IsError reports whether the reply is an error reply.
func (r Reply) IsError() bool { return r.Kind == KindError }

// Equal reports whether two replies have the same type and content.
func (r Reply) Equal(o Reply) bool {
	if r.Kind != o.Kind || r.Int != o.Int || r.Str != o.Str || len(r.Elems) != len(o.Elems) {
		return false
	}
	for i := range r.Elems {
		if !r.Elems[i].Equal(o.Elems[i]) {
			return false
		}
	}
	return true
}

// String renders the reply the way redis-cli shows types.
func (r Reply) String() string {
	switch r.Kind {
	case KindNil:
		return "(nil)"
	case KindInt:
		return "(integer) " + strconv.FormatInt(r.Int, 10)
	case KindBulk:
		return strconv.Quote(r.Str)
	case KindStatus:
		return "+" + r.Str
	case KindError:
		return "(error) " + r.Str
	case KindHostSkip:
		return "(not sent: host read the pause flag)"
	case KindArray:
		parts := make([]string, len(r.Elems))
		for i, e := range r.Elems {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("(kind %d)", r.Kind)
}

// fromResult converts a valkey-go result. A transport failure is returned as
// an error; a server error reply is a Reply of KindError with its exact text.
func fromResult(res valkey.ValkeyResult) (Reply, error) {
	if err := res.NonValkeyError(); err != nil {
		return Reply{}, fmt.Errorf("%w: %v", ErrServer, err)
	}
	msg, _ := res.ToMessage()
	return fromMessage(&msg), nil
}

func fromMessage(m *valkey.ValkeyMessage) Reply {
	switch {
	case m.IsNil():
		return Reply{Kind: KindNil}
	case m.IsInt64():
		n, _ := m.AsInt64()
		return Reply{Kind: KindInt, Int: n}
	case m.IsArray():
		elems, _ := m.ToArray()
		out := Reply{Kind: KindArray, Elems: make([]Reply, len(elems))}
		for i := range elems {
			out.Elems[i] = fromMessage(&elems[i])
		}
		return out
	case m.IsString():
		s, _ := m.ToString()
		if messageType(m) == "simple string" {
			return Reply{Kind: KindStatus, Str: s}
		}
		return Reply{Kind: KindBulk, Str: s}
	}
	if m.Error() != nil {
		// ToString returns the untrimmed text of an error reply (Error()
		// drops a leading "ERR ").
		s, _ := m.ToString()
		return Reply{Kind: KindError, Str: s}
	}
	return Reply{Kind: KindError, Str: "verify: unsupported reply type " + messageType(m)}
}

// messageType is the type name valkey-go gives the message (it tells a
// status reply from a bulk string, which its accessors do not).
func messageType(m *valkey.ValkeyMessage) string {
	var pretty struct{ Type string }
	_ = json.Unmarshal([]byte(m.String()), &pretty)
	return pretty.Type
}
