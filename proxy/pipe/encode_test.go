package pipe

import (
	"testing"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// TestEncodeKeepsTheTail: a rewritten head goes over the client's own bytes
// from the first argument not replaced on (resp's TestGuardRawAndTail
// checks the tail itself), and a passed command is the client's bytes.
func TestEncodeKeepsTheTail(t *testing.T) {
	in := []byte("*4\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n0\r\n$2\r\nxy\r\n*1\r\n$4\r\nPING\r\n")
	fr := resp.Framer{Limits: resp.Limits{MaxMultibulk: resp.DefaultMaxMultibulk, MaxBulk: resp.DefaultMaxBulk, MaxInline: resp.DefaultMaxInline}}
	f, st, _, _, _ := fr.Next(in)
	if st != resp.Framed {
		t.Fatalf("status %v", st)
	}
	// A rewritten head over the same tail, as encode sends it.
	d := rewrite.Decision{Action: rewrite.Rewrite, Head: "EMQ.ENQUEUE", Replace: 2}
	if out := Encode(nil, f, &d); string(out) != "*3\r\n$11\r\nEMQ.ENQUEUE\r\n$1\r\n0\r\n$2\r\nxy\r\n" {
		t.Errorf("rewritten = %q", out)
	}
	if out := Encode(nil, f, &rewrite.Decision{Action: rewrite.Pass}); string(out) != string(f.Raw) {
		t.Errorf("passed = %q, want the client's bytes %q", out, f.Raw)
	}
}
