package fence

import (
	"errors"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
)

func TestDecodeReply(t *testing.T) {
	r, rest, err := Decode([]byte("*3\r\n$-1\r\n:5\r\n*1\r\n+ok\r\n:7\r\n"))
	if err != nil || string(rest) != ":7\r\n" {
		t.Fatalf("decode: %v, rest %q", err, rest)
	}
	if len(r.Elems) != 3 || !r.Elems[0].Null || r.Elems[0].Type != '$' || r.Elems[1].Int != 5 || r.Elems[1].Str != "5" || r.Elems[2].Elems[0].Str != "ok" {
		t.Errorf("decoded %+v", r)
	}
	e, _, _ := Decode([]byte("-ERR nope\r\n"))
	if !e.IsError() || e.Str != "ERR nope" {
		t.Errorf("error reply %+v", e)
	}
	m, _, err := Decode([]byte("%1\r\n$4\r\nwire\r\n$12\r\nechomq:6.0.0\r\n"))
	if err != nil || m.Type != '%' || len(m.Elems) != 2 || m.Elems[1].Str != "echomq:6.0.0" {
		t.Errorf("map %+v, %v", m, err)
	}
	if n, _, err := Decode([]byte("_\r\n")); err != nil || !n.Null || n.Type != '_' {
		t.Errorf("null %+v, %v", n, err)
	}
	for _, in := range []string{"", "$3\r\nab", ":x\r\n", "?\r\n", "*2\r\n:1\r\n"} {
		if _, _, err := Decode([]byte(in)); !errors.Is(err, resp.ErrProtocol) {
			t.Errorf("Decode(%q): %v, want a protocol error", in, err)
		}
	}
}
