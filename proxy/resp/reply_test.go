package resp

import (
	"bufio"
	"strings"
	"testing"
)

func TestReplyReaderFramesEveryType(t *testing.T) {
	replies := []string{
		"+OK\r\n",
		"-ERR bad thing\r\n",
		":-42\r\n",
		"$-1\r\n",
		"*-1\r\n",
		"$0\r\n\r\n",
		"$5\r\na\r\nbc\r\n",
		"*0\r\n",
		"*3\r\n:1\r\n*2\r\n$1\r\na\r\n*-1\r\n$-1\r\n",
		"*2\r\n*2\r\n$8\r\n13.36139\r\n$9\r\n38.115556\r\n*-1\r\n",
		"_\r\n", "#t\r\n", ",3.14\r\n", "(123456789012345678901234567890\r\n",
		"!9\r\nERR bulky\r\n", "=8\r\ntxt:abcd\r\n",
		"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n_\r\n",
		"~2\r\n+x\r\n+y\r\n",
		">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
		"|1\r\n+ttl\r\n:3\r\n+value\r\n",
		"+" + strings.Repeat("x", 300) + "\r\n", // longer than the reader's buffer
	}
	stream := strings.Join(replies, "")
	rr := NewReader(bufio.NewReaderSize(strings.NewReader(stream), 16))
	for i, want := range replies {
		got, over, err := rr.Read(nil, -1)
		if err != nil || over || string(got) != want {
			t.Fatalf("reply %d = %q, %v, %v; want %q", i, got, over, err, want)
		}
	}
}

func TestReplyReaderCapKeepsStreamInSync(t *testing.T) {
	big := "$20\r\n" + strings.Repeat("z", 20) + "\r\n"
	stream := "*2\r\n" + big + big + ":7\r\n"
	rr := NewReader(bufio.NewReaderSize(strings.NewReader(stream), 16))
	got, over, err := rr.Read(nil, 30)
	if err != nil || !over || len(got) > 30 {
		t.Fatalf("capped read = %q, %v, %v", got, over, err)
	}
	got, over, err = rr.Read(nil, 30)
	if err != nil || over || string(got) != ":7\r\n" {
		t.Fatalf("next reply = %q, %v, %v", got, over, err)
	}
}

func TestReplyReaderRejectsGarbage(t *testing.T) {
	for _, in := range []string{"?\r\n", "$x\r\n", "*-2\r\n", "+no crlf\n", "$-1x\r\n"} {
		rr := NewReader(bufio.NewReader(strings.NewReader(in)))
		if _, _, err := rr.Read(nil, -1); err == nil {
			t.Errorf("%q framed without error", in)
		}
	}
}

func TestDecodeReply(t *testing.T) {
	r, rest, err := Decode([]byte("*3\r\n$-1\r\n:5\r\n*1\r\n+ok\r\n"))
	if err != nil || len(rest) != 0 {
		t.Fatalf("decode: %v, rest %q", err, rest)
	}
	if len(r.Elems) != 3 || !r.Elems[0].Null || r.Elems[1].Int != 5 || r.Elems[2].Elems[0].Str != "ok" {
		t.Errorf("decoded %+v", r)
	}
	e, _, _ := Decode([]byte("-ERR nope\r\n"))
	if !e.IsError() || e.Str != "ERR nope" {
		t.Errorf("error reply %+v", e)
	}
}
