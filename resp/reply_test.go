package resp

import (
	"bufio"
	"errors"
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

func TestReadReplyChecksTheBytes(t *testing.T) {
	stream := "*2\r\n$1\r\na\r\n:1\r\n" + "$3\r\nabcde\r\n"
	br := bufio.NewReaderSize(strings.NewReader(stream), 16)
	if got, err := ReadReply(br); err != nil || string(got) != "*2\r\n$1\r\na\r\n:1\r\n" {
		t.Fatalf("ReadReply = %q, %v", got, err)
	}
	for _, in := range []string{"$3\r\nabcde\r\n", ":+1\r\n", "#x\r\n", "*1\r\n$2\r\nab\n\n"} {
		if got, err := ReadReply(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, ErrProtocol) {
			t.Errorf("ReadReply(%q) = %q, %v; want a protocol error", in, got, err)
		}
	}
}
