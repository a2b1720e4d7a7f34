package legacy

import (
	"errors"
	"testing"
)

func TestValueString(t *testing.T) {
	for _, tc := range []struct {
		v    Value
		want string
	}{
		{Value{Kind: KindInt, Int: 1}, "1"},
		{Value{Kind: KindNil}, "nil"},
		{Value{Kind: KindArray}, "[]"},
		{Value{Kind: KindArray, Array: []Value{{Kind: KindString, Str: "JOB0KHTOWnGLuC"}, {Kind: KindString, Str: "p"}, {Kind: KindInt, Int: 1}}}, `["JOB0KHTOWnGLuC", "p", 1]`},
		{Value{Kind: KindError, Str: "EMQWIRE EMQ.CLAIM wants 2 keys, got 1"}, "(error) EMQWIRE EMQ.CLAIM wants 2 keys, got 1"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v prints %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestValueEqual(t *testing.T) {
	a := Value{Kind: KindArray, Array: []Value{{Kind: KindString, Str: "x"}, {Kind: KindInt, Int: 2}}}
	b := Value{Kind: KindArray, Array: []Value{{Kind: KindString, Str: "x"}, {Kind: KindInt, Int: 2}}}
	c := Value{Kind: KindArray, Array: []Value{{Kind: KindString, Str: "x"}, {Kind: KindInt, Int: 3}}}
	if !a.Equal(b) || a.Equal(c) || a.Equal(Value{Kind: KindArray}) {
		t.Fatal("Equal compares arrays element by element")
	}
	if (Value{Kind: KindString, Str: "1"}).Equal(Value{Kind: KindInt, Int: 1}) {
		t.Fatal("a string equals an integer")
	}
}

func TestDecodeRejectsShapes(t *testing.T) {
	if _, _, err := decodeJob("claim2", Value{Kind: KindArray, Array: []Value{{Kind: KindString, Str: "a"}}}); !errors.Is(err, ErrReply) {
		t.Fatalf("a one-element claim reply: %v", err)
	}
	if _, err := decodeBool("enqueue", Value{Kind: KindInt, Int: 2}); !errors.Is(err, ErrReply) {
		t.Fatalf("enqueue answering 2: %v", err)
	}
	if _, err := decodeInt("extend", Value{Kind: KindError, Str: "WRONGTYPE x"}); !errors.Is(err, ErrRefused) {
		t.Fatalf("an error reply: %v", err)
	}
	row, found, err := decodeRow("peek", Value{Kind: KindArray, Array: []Value{{Kind: KindString, Str: "done"}, {Kind: KindNil}, {Kind: KindString, Str: "p"}}})
	if err != nil || !found || row != (Row{State: "done", Payload: "p"}) {
		t.Fatalf("peek with a nil field: %+v %v %v", row, found, err)
	}
}
