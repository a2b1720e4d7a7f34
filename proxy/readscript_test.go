package proxy

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// A script that writes, pinned as a read by mistake, and one that reads.
const (
	writingBody = "redis.call('SET', KEYS[1], 'written') return 1"
	readingBody = "return redis.call('GET', KEYS[1])"
)

// misdeclaredPolicy pins writingBody and readingBody as declared reads.
func misdeclaredPolicy(t *testing.T) *rewrite.Policy {
	t.Helper()
	m, err := shamap.Parse([]byte("legacy_brand: \"echomq:4.0.0\"\nscripts:\n" +
		"  - {name: oops, sha: \"" + shamap.SHA([]byte(writingBody)) + "\", read: true, keys: 1, values: 0}\n" +
		"  - {name: look, sha: \"" + shamap.SHA([]byte(readingBody)) + "\", read: true, keys: 1, values: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &rewrite.Policy{Map: m}
}

// TestDeclaredReadsRunReadOnly: a declared read leaves as EVALSHA_RO (and
// EVAL of its body as EVAL_RO), so a script that writes, declared a read
// by mistake, gets the server's read-only refusal and writes nothing; the
// replies are the server's own to EVALSHA_RO/EVAL_RO, and a real read
// answers as it does directly.
func TestDeclaredReadsRunReadOnly(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, func(o *Options) { o.Policy = misdeclaredPolicy(t) })
		oops, look := shamap.SHA([]byte(writingBody)), shamap.SHA([]byte(readingBody))
		d, c := dial(t, direct.Addr), h.dial()
		for _, side := range []*client{d, c} {
			side.do("SET", "r", "v").is("+OK\r\n")
			side.do("SCRIPT", "LOAD", writingBody).is("$40\r\n" + oops + "\r\n")
			side.do("SCRIPT", "LOAD", readingBody).is("$40\r\n" + look + "\r\n")
		}
		steps := []struct{ direct, proxy []string }{
			{cmd("EVALSHA_RO", oops, "1", "w1"), cmd("EVALSHA", oops, "1", "w1")},
			{cmd("EVAL_RO", writingBody, "1", "w2"), cmd("EVAL", writingBody, "1", "w2")},
			{cmd("EVALSHA_RO", oops, "1", "w3"), cmd("EVALSHA_RO", oops, "1", "w3")},
			{cmd("EVALSHA", look, "1", "r"), cmd("EVALSHA", look, "1", "r")},
			{cmd("EVAL", readingBody, "1", "r"), cmd("eval", readingBody, "1", "r")},
		}
		for _, st := range steps {
			want, got := d.do(st.direct...).got, c.do(st.proxy...).got
			if string(want) != string(got) {
				t.Errorf("%q: direct %q, proxy %q", st.proxy, want, got)
			}
		}
		if r := string(c.do("EVALSHA", oops, "1", "w1").got); !strings.HasPrefix(r, "-ERR Write commands are not allowed from read-only scripts") {
			t.Errorf("a writing read through the proxy answered %q", r)
		}
		admin := dial(t, behind.Addr)
		admin.do("EXISTS", "w1", "w2", "w3").is(":0\r\n")
	})
}
