package resp

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// BenchmarkReader measures framing a 16-reply pipeline of the common
// small replies (statuses, integers, bulks, a short array) off a
// bufio.Reader.
func BenchmarkReader(b *testing.B) {
	one := "+OK\r\n:12345\r\n$16\r\n0123456789abcdef\r\n*2\r\n$3\r\nfoo\r\n$-1\r\n"
	in := []byte(strings.Repeat(one, 4))
	src := bytes.NewReader(in)
	br := bufio.NewReaderSize(src, 64<<10)
	r := NewReader(br)
	dst := make([]byte, 0, 256)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(in)
		br.Reset(src)
		for range 16 {
			var err error
			if dst, _, err = r.Read(dst[:0], 1<<20); err != nil {
				b.Fatal(err)
			}
		}
	}
}
