package resp

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, in := range []string{"+OK\r\n", "-ERR x y\r\n", ":-3\r\n", "$-1\r\n", "*-1\r\n", "$0\r\n\r\n", "*2\r\n*1\r\n:1\r\n$3\r\na\r\n\r\n", "*0\r\n",
		// RESP3: null, booleans, double, big number, verbatim, blob error,
		// map, set, push, attribute.
		"_\r\n", "#t\r\n", "#f\r\n", ",1.5\r\n", "(3492890328409238509324850943850943825024385\r\n",
		"=15\r\ntxt:Some string\r\n", "!21\r\nSYNTAX invalid syntax\r\n", "%1\r\n$1\r\nf\r\n$1\r\n1\r\n",
		"~2\r\n$1\r\na\r\n:2\r\n", ">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n", "|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*1\r\n:1\r\n"} {
		v, err := Parse([]byte(in))
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := string(v.AppendRESP(nil)); got != in {
			t.Errorf("%q re-encodes as %q", in, got)
		}
	}
	for _, in := range []string{"", "+OK", "$3\r\nab\r\n", "*2\r\n:1\r\n", ":1\r\n:2\r\n", "?x\r\n", "_x\r\n", "#x\r\n", "=-1\r\n", "%1\r\n:1\r\n", "|1\r\n+a\r\n+b\r\n",
		// numbers the server would not write, a bulk not ended by CRLF, lengths past the bytes
		":+1\r\n", ":01\r\n", "$+1\r\na\r\n", "$1\r\nab\r\n", "$9223372036854775807\r\n", "*9223372036854775807\r\n"} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q parsed", in)
		}
	}
}

func TestParsePrefixLeavesTheRest(t *testing.T) {
	v, n, err := ParsePrefix([]byte("*3\r\n$-1\r\n:5\r\n*1\r\n+ok\r\n+next\r\n"))
	if err != nil || n != 22 {
		t.Fatalf("ParsePrefix: %d, %v", n, err)
	}
	if len(v.Elems) != 3 || !v.Elems[0].Nil || v.Elems[1].Int != 5 || string(v.Elems[2].Elems[0].Str) != "ok" {
		t.Errorf("parsed %+v", v)
	}
}

func TestAppenders(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{string(AppendArray(nil, 3)), "*3\r\n"},
		{string(AppendArray([]byte("x"), -1)), "x*-1\r\n"},
		{string(AppendBulk(nil, []byte("a\r\nb"))), "$4\r\na\r\nb\r\n"},
		{string(AppendBulk(nil, nil)), "$0\r\n\r\n"},
		{string(AppendBulkString(nil, "GET")), "$3\r\nGET\r\n"},
		{string(AppendInt(nil, -42)), ":-42\r\n"},
		{string(AppendVerbatim(nil, []byte("hi"))), "=6\r\ntxt:hi\r\n"},
		{string(AppendCommand(nil, "SET", "k", "")), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"},
		{string(AppendCommand(nil)), "*0\r\n"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// FuzzParse checks the parser against its encoder and against the
// Reader: a reply Parse takes re-encodes to its own bytes, and when the
// Reader frames the same bytes it frames all of them as one reply.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"+OK\r\n", ":-3\r\n", "$-1\r\n", "$3\r\nabc\r\n", "*2\r\n*1\r\n:1\r\n$3\r\na\r\n\r\n",
		"_\r\n", "#t\r\n", ",1.5\r\n", "=15\r\ntxt:Some string\r\n", "!3\r\nERR\r\n", "%1\r\n$1\r\nf\r\n:1\r\n",
		"~1\r\n+a\r\n", ">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n", "|1\r\n+a\r\n:1\r\n+b\r\n", "*-1\r\n", ":01\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Parse(%q): %v, not a protocol error", in, err)
			}
			return
		}
		if got := v.AppendRESP(nil); !bytes.Equal(got, in) {
			t.Fatalf("Parse(%q) re-encodes as %q", in, got)
		}
		r := NewReader(bufio.NewReader(bytes.NewReader(in)))
		if got, over, err := r.Read(nil, -1); err == nil && (over || !bytes.Equal(got, in)) {
			t.Fatalf("Reader frames %q as %q (over %v)", in, got, over)
		}
	})
}
