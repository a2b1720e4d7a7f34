package resp

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

func testLimits() Limits {
	return Limits{MaxMultibulk: DefaultMaxMultibulk, MaxBulk: DefaultMaxBulk, MaxInline: DefaultMaxInline}
}

// frameAll frames buf to the end and returns the args of each command, the
// consumed length and the error reply (nil when none).
func frameAll(t testing.TB, lim Limits, buf []byte) (cmds [][]string, consumed int, errReply []byte, incomplete bool) {
	fr := Framer{Limits: lim}
	for {
		f, st, n, _, er := fr.Next(buf[consumed:])
		switch st {
		case Framed:
			var args []string
			for _, a := range f.Args {
				args = append(args, string(a))
			}
			cmds = append(cmds, args)
			consumed += n
		case Skipped:
			consumed += n
		case Incomplete:
			return cmds, consumed, nil, consumed < len(buf)
		case Invalid:
			return cmds, consumed, er, false
		}
	}
}

func TestGuardFramesAsRedisDoes(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		want       []string // commands, args joined by "|"
		err        string
		incomplete bool
	}{
		{name: "one", in: "*1\r\n$4\r\nPING\r\n", want: []string{"PING"}},
		{name: "pipeline", in: "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n", want: []string{"GET|k", "PING"}},
		{name: "empty arg", in: "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", want: []string{"ECHO|"}},
		{name: "binary arg", in: "*2\r\n$4\r\nECHO\r\n$3\r\n\x00\r\n\r\n", want: []string{"ECHO|\x00\r\n"}},
		{name: "zero and negative counts ignored", in: "*0\r\n*-1\r\n*-5\r\n*1\r\n$4\r\nPING\r\n", want: []string{"PING"}},
		{name: "trailer bytes unchecked", in: "*1\r\n$4\r\nPINGxx", want: []string{"PING"}},
		{name: "header newline unchecked", in: "*1\r\n$4\rXPING\r\n", want: []string{"PING"}},
		{name: "partial header", in: "*1\r\n$4", incomplete: true},
		{name: "partial data", in: "*1\r\n$4\r\nPI", incomplete: true},
		{name: "cr at end", in: "*1\r", incomplete: true},
		{name: "huge bulk", in: "*1\r\n$9223372036854775807\r\n", err: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "bulk over limit", in: "*1\r\n$536870913\r\n", err: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "bulk at limit waits", in: "*1\r\n$536870912\r\n", incomplete: true},
		{name: "huge multibulk", in: "*9223372036854775807\r\n", err: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "multibulk over limit", in: "*1048577\r\n", err: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "multibulk leading zero", in: "*01\r\n$4\r\nPING\r\n", err: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "multibulk plus", in: "*+1\r\n$4\r\nPING\r\n", err: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "multibulk minus zero", in: "*-0\r\n", err: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "multibulk empty", in: "*\r\n", err: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "bulk negative", in: "*1\r\n$-1\r\n", err: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "bulk leading zero", in: "*1\r\n$04\r\nPING\r\n", err: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "bulk empty", in: "*1\r\n$\r\n", err: "-ERR Protocol error: invalid bulk length\r\n"},
		{name: "not a bulk", in: "*1\r\nx\r\n", err: "-ERR Protocol error: expected '$', got 'x'\r\n"},
		{name: "good then bad", in: "*1\r\n$4\r\nPING\r\n*abc\r\n", want: []string{"PING"}, err: "-ERR Protocol error: invalid multibulk length\r\n"},
		{name: "long mbulk count", in: "*" + strings.Repeat("1", 70000), err: "-ERR Protocol error: too big mbulk count string\r\n"},
		{name: "long bulk count", in: "*1\r\n" + strings.Repeat("$", 70000), err: "-ERR Protocol error: too big bulk count string\r\n"},
		{name: "inline", in: "SET a b\r\n", want: []string{"SET|a|b"}},
		{name: "inline lf only", in: "  \r\nPING\n", want: []string{"PING"}},
		{name: "inline empty lines", in: "\r\n\r\nPING\r\n", want: []string{"PING"}},
		{name: "inline quotes", in: "ECHO \"\\x41\\n\"\r\n", want: []string{"ECHO|A\n"}},
		{name: "inline single quotes", in: "ECHO 'a\\'b'\r\n", want: []string{"ECHO|a'b"}},
		{name: "inline empty quoted", in: "ECHO \"\"\r\n", want: []string{"ECHO|"}},
		{name: "inline short hex", in: "ECHO \"\\x4\"\r\n", want: []string{"ECHO|x4"}},
		{name: "inline unknown escape", in: "ECHO \"\\q\"\r\n", want: []string{"ECHO|q"}},
		{name: "inline trailing spaces", in: "ECHO \"a\"  \r\n", want: []string{"ECHO|a"}},
		{name: "inline unbalanced", in: "SET a \"b\r\n", err: "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{name: "inline quote then text", in: "SET a \"b\"c\r\n", err: "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{name: "inline quote inside word", in: "ECHO a\"b\r\n", err: "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{name: "inline NUL hides newline", in: "ECHO a\x00b\r\n", incomplete: true},
		{name: "inline too long", in: strings.Repeat("A", 70000), err: "-ERR Protocol error: too big inline request\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmds, _, er, inc := frameAll(t, testLimits(), []byte(tc.in))
			var got []string
			for _, c := range cmds {
				got = append(got, strings.Join(c, "|"))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("commands = %q, want %q", got, tc.want)
			}
			if string(er) != tc.err {
				t.Errorf("error = %q, want %q", er, tc.err)
			}
			if inc != tc.incomplete {
				t.Errorf("incomplete = %v, want %v", inc, tc.incomplete)
			}
		})
	}
}

func TestGuardUnauthenticatedLimits(t *testing.T) {
	lim := testLimits()
	lim.Unauthenticated = true
	_, _, er, _ := frameAll(t, lim, []byte("*11\r\n"))
	if string(er) != "-ERR Protocol error: unauthenticated multibulk length\r\n" {
		t.Errorf("multibulk: %q", er)
	}
	_, _, er, _ = frameAll(t, lim, []byte("*2\r\n$4\r\nAUTH\r\n$16385\r\n"))
	if string(er) != "-ERR Protocol error: unauthenticated bulk length\r\n" {
		t.Errorf("bulk: %q", er)
	}
	cmds, _, er, _ := frameAll(t, lim, []byte("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"))
	if er != nil || len(cmds) != 1 {
		t.Errorf("AUTH within limits: %q %q", cmds, er)
	}
}

func TestGuardRawAndTail(t *testing.T) {
	in := []byte("*4\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n0\r\n$2\r\nxy\r\n*1\r\n$4\r\nPING\r\n")
	fr := Framer{Limits: testLimits()}
	f, st, n, _, _ := fr.Next(in)
	if st != Framed {
		t.Fatalf("status %v", st)
	}
	if string(f.Raw) != string(in[:n]) || !strings.HasSuffix(string(f.Raw), "$2\r\nxy\r\n") {
		t.Errorf("raw = %q", f.Raw)
	}
	if got := string(f.TailFrom(2)); got != "$1\r\n0\r\n$2\r\nxy\r\n" {
		t.Errorf("tail from 2 = %q", got)
	}
	if got := f.TailFrom(4); got != nil {
		t.Errorf("tail past the end = %q", got)
	}
	// The proxy's encode sends a rewritten head over this tail
	// (TestEncodeKeepsTheTail in package proxy).
}

// within reports whether b lies inside buf's memory.
func within(b, buf []byte) bool {
	if len(b) == 0 {
		return true
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(buf))
}

func FuzzGuard(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "PING\r\n", "SET a \"b\\x41\"\r\n",
		"*1\r\n$9223372036854775807\r\n", "*9223372036854775807\r\n", "*0\r\n", "*-1\r\n", "ECHO 'a\\'b'\n",
		"*3\r\n$7\r\nEVALSHA\r\n$40\r\n7750f40b44bcdd7e0eaa5a8f2c66391ecbcde7f8\r\n$1\r\n0\r\n",
	} {
		f.Add([]byte(s), uint16(64), uint8(4), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, maxBulk uint16, maxMulti uint8, unauth bool) {
		lim := Limits{MaxMultibulk: int(maxMulti), MaxBulk: int(maxBulk), MaxInline: 256, Unauthenticated: unauth}
		fr := Framer{Limits: lim}
		pos := 0
		for pos <= len(in) {
			buf := in[pos:]
			f, st, n, need, er := fr.Next(buf)
			switch st {
			case Incomplete:
				if need != 0 && need <= len(buf) {
					t.Fatalf("incomplete but need %d <= %d", need, len(buf))
				}
				return
			case Invalid:
				if !bytes.HasPrefix(er, []byte("-ERR Protocol error: ")) || !bytes.HasSuffix(er, []byte("\r\n")) {
					t.Fatalf("bad error reply %q", er)
				}
				return
			case Skipped:
				if n <= 0 || n > len(buf) {
					t.Fatalf("skip consumed %d of %d", n, len(buf))
				}
			case Framed:
				if n <= 0 || n > len(buf) || len(f.Args) == 0 {
					t.Fatalf("ok consumed %d of %d with %d args", n, len(buf), len(f.Args))
				}
				if len(f.Args) > max(lim.MaxMultibulk, 0) && buf[0] == '*' {
					t.Fatalf("%d args over the limit %d", len(f.Args), lim.MaxMultibulk)
				}
				if unauth && len(f.Args) > unauthMaxMultibulk {
					t.Fatalf("%d args while unauthenticated", len(f.Args))
				}
				if len(f.argStart) != len(f.Args) {
					t.Fatalf("argStart %d for %d args", len(f.argStart), len(f.Args))
				}
				if buf[0] == '*' {
					if !within(f.Raw, buf[:n]) {
						t.Fatalf("raw outside the command")
					}
					for _, a := range f.Args {
						if !within(a, buf[:n]) {
							t.Fatalf("arg outside the command")
						}
						if len(a) > lim.MaxBulk {
							t.Fatalf("arg of %d over the limit %d", len(a), lim.MaxBulk)
						}
					}
				}
				// The raw bytes Frame again to the same command.
				fr2 := Framer{Limits: testLimits()}
				g, st2, n2, _, _ := fr2.Next(f.Raw)
				if st2 != Framed || n2 != len(f.Raw) || len(g.Args) != len(f.Args) {
					t.Fatalf("raw %q does not reframe: %v %d", f.Raw, st2, n2)
				}
				for i := range g.Args {
					if !bytes.Equal(g.Args[i], f.Args[i]) {
						t.Fatalf("arg %d reframes as %q, was %q", i, g.Args[i], f.Args[i])
					}
				}
				if len(f.Args) > 1 && !bytes.HasPrefix(f.TailFrom(1), []byte("$")) {
					t.Fatalf("tail %q", f.TailFrom(1))
				}
			}
			pos += n
		}
	})
}

// TestHeaderIntMatchesGeneralPath checks headerInt's one-pass reading
// against headerEnd and ParseInt, on edge cases and on many random lines.
func TestHeaderIntMatchesGeneralPath(t *testing.T) {
	ref := func(b []byte) (int, int64, bool) {
		nl := headerEnd(b)
		if nl < 1 {
			return nl, 0, false
		}
		v, ok := ParseInt(b[1:nl])
		return nl, v, ok
	}
	check := func(b []byte) {
		t.Helper()
		nl, v, ok := headerInt(b)
		wnl, wv, wok := ref(b)
		if nl != wnl || ok != wok || (ok && v != wv) {
			t.Fatalf("headerInt(%q) = %d %d %v, want %d %d %v", b, nl, v, ok, wnl, wv, wok)
		}
	}
	for _, s := range []string{
		"", "*", "*\r", "$\r\n", "\r\n", "$0\r\n", "$00\r\n", "$01\r\n", "$10\r\n", "$-1\r\n", "$-0\r\n",
		"*999999999999999999\r\n", "*9999999999999999999\r\n", "*9223372036854775807\r\n",
		"*9223372036854775808\r\n", "*123456789012345678901\r\n", "$1\x00\r\n", "$\x001\r\n",
		"$12", "$12\n", "$ 1\r\n", "$1 \r\n", "$+1\r\n", "$1a\r\n",
	} {
		check([]byte(s))
	}
	const alphabet = "0123456789-\r\n\x00$*a+ "
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		b := make([]byte, 1+rng.IntN(24))
		b[0] = "$*"[rng.IntN(2)]
		for i := 1; i < len(b); i++ {
			if rng.IntN(4) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = '0' + byte(rng.IntN(10))
			}
		}
		check(b)
	}
}

// BenchmarkFramer measures framing a 16-command pipeline.
func BenchmarkFramer(b *testing.B) {
	var in []byte
	for range 16 {
		in = AppendCommand(in, "SET", "key:000001", "0123456789abcdef")
	}
	fr := Framer{Limits: testLimits()}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		fr.Reset()
		for pos := 0; pos < len(in); {
			_, _, n, _, _ := fr.Next(in[pos:])
			pos += n
		}
	}
}
