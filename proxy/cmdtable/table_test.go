package cmdtable

import (
	"bufio"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// testTimeout bounds each test's talk with its server.
const testTimeout = 15 * time.Second

// setupConn is a fence.Conn on one connection, as the proxy's setup
// connection is: one command at a time, its reply framed and decoded by
// package resp.
type setupConn struct {
	nc net.Conn
	rr resp.Reader
}

// Do implements fence.Conn.
func (c *setupConn) Do(ctx context.Context, args ...string) (fence.Reply, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(dl)
	}
	if _, err := c.nc.Write(resp.AppendCommand(nil, args...)); err != nil {
		return fence.Reply{}, err
	}
	raw, _, err := c.rr.Read(nil, -1)
	if err != nil {
		return fence.Reply{}, err
	}
	r, _, err := fence.Decode(raw)
	return r, err
}

// rawSetup opens a setup connection to addr.
func rawSetup(t *testing.T, addr string) *setupConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &setupConn{nc: nc, rr: resp.NewReader(bufio.NewReader(nc))}
}

// TestKeyPositionsMatchGetkeys holds the key positions the proxy computes
// from a module node's COMMAND table to the node's own COMMAND GETKEYS.
func TestKeyPositionsMatchGetkeys(t *testing.T) { node.EachServer(t, testKeyPositionsMatchGetkeys) }

func testKeyPositionsMatchGetkeys(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sc := rawSetup(t, n.Addr)
	tab, err := Load(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	var ks Store
	ks.Merge(tab)

	cases := []string{
		"GET k",
		"SET k v EX 10",
		"MSET a 1 b 2 c 3",
		"MGET a b c",
		"DEL a b",
		"RENAME a b",
		"LMOVE a b LEFT RIGHT",
		"BLMOVE a b LEFT RIGHT 0",
		"BLPOP a b 0",
		"BLMPOP 0 2 a b LEFT",
		"LMPOP 3 a b c RIGHT COUNT 2",
		"ZUNIONSTORE d 2 a b WEIGHTS 1 2",
		"ZUNION 2 a b",
		"ZINTERCARD 2 a b LIMIT 1",
		"SINTERCARD 3 a b c",
		"BZMPOP 0 2 a b MIN",
		"XREAD COUNT 2 STREAMS s1 s2 0 0",
		"XREAD BLOCK 0 STREAMS s1 $",
		"XREADGROUP GROUP g c COUNT 1 STREAMS s1 s2 > >",
		"XADD s * f v",
		"GEORADIUS k 0 0 1 km STORE d",
		"GEOSEARCHSTORE d s FROMMEMBER m BYRADIUS 1 km",
		"OBJECT ENCODING k",
		"XINFO STREAM k",
		"MEMORY USAGE k",
		"BITOP AND d a b",
		"LCS a b",
		"EXISTS a b c",
		"EVALSHA 0000000000000000000000000000000000000000 2 a b x",
		"EVAL return 3 a b c x",
		"FCALL_RO f 1 k x",
		"EMQ.ENQUEUE 2 emq:{q}:pending emq:{q}:job:1 1 p",
		"EMQ.INSTALL 1 {emq}:version",
		"PFCOUNT a b",
		"WATCH a b",
		"COPY a b",
		"SMOVE a b m",
		"MSETNX a 1 b 2",
	}
	for _, line := range cases {
		args := strings.Fields(line)
		bargs := make([][]byte, len(args))
		for i, a := range args {
			bargs[i] = []byte(a)
		}
		ck := ks.Lookup(bargs)
		if ck == nil {
			t.Errorf("%s: not in the table", line)
			continue
		}
		if ck.Ask {
			t.Errorf("%s: the table leaves its keys open", line)
			continue
		}
		var got []string
		for _, i := range ck.Positions(bargs, nil) {
			got = append(got, args[i])
		}
		r, err := sc.Do(ctx, append([]string{"COMMAND", "GETKEYS"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range r.Elems {
			want = append(want, e.Str)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: keys %q, the server says %q (%s)", line, got, want, r.Str)
		}
	}
	for _, line := range []string{"SORT k BY w_* STORE d", "SORT_RO k BY w_*"} {
		args := strings.Fields(line)
		bargs := make([][]byte, len(args))
		for i, a := range args {
			bargs[i] = []byte(a)
		}
		if ck := ks.Lookup(bargs); ck == nil || !ck.Ask {
			t.Errorf("%s: want its keys asked of the server", line)
		}
	}
	if ks.Lookup([][]byte{[]byte("NOSUCHCOMMAND")}) != nil {
		t.Error("an unknown command has an entry")
	}
}

// TestKeywordStart covers the keyword search in both directions.
func TestKeywordStart(t *testing.T) {
	args := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	cases := []struct {
		line      string
		keyword   string
		startfrom int
		want      int
	}{
		{"XREAD COUNT 1 STREAMS a 0", "STREAMS", 1, 4},
		{"XREAD COUNT 1 streams a 0", "STREAMS", 1, 4},
		{"XREAD COUNT 1", "STREAMS", 1, 0},
		{"MIGRATE h p  0 5 KEYS a b", "KEYS", -2, 6},
		{"X KEYS", "KEYS", 1, 0}, // the last argument is never a keyword: nothing follows it
	}
	for _, c := range cases {
		if got := keywordStart(args(c.line), c.keyword, c.startfrom); got != c.want {
			t.Errorf("%q: %d, want %d", c.line, got, c.want)
		}
	}
}
