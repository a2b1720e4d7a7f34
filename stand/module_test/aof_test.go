package moduletest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// readAOF returns the bytes of every file of the node's append-only log.
func readAOF(t *testing.T, dir string) []byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "appendonlydir", "*.aof"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no AOF files in %s: %v", dir, err)
	}
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		all = append(all, b...)
	}
	return all
}

// TestAOFHoldsPlainCommands checks that the verbs' writes reach the AOF as
// the plain commands the handlers called, with absolute scores, that no
// EMQ.* record is written, and that a restart loading the AOF gives back
// the same keyspace.
func TestAOFHoldsPlainCommands(t *testing.T) { node.EachServer(t, testAOFHoldsPlainCommands) }

func testAOFHoldsPlainCommands(t *testing.T, srv node.Server) {
	n, c := startModule(t, node.Options{Server: srv.Path, AOF: true})
	x := q{t: t, c: c, name: "quotes"}
	x.expect(":1\r\n", x.enqueue("J1", "p1")...)
	x.expect(":1\r\n", x.enqueue("J2", "p2")...)
	x.expect(array(bulk("J1"), bulk("p1"), ":1\r\n"), x.claim("30000")...)
	deadline := x.set("active")["J1"]
	x.expect(":1\r\n", x.complete("J1")...)
	x.c.do(x.claim("30000")...)
	x.c.do(x.fail("J2", "boom", "5", "1000")...)
	x.expect(":1\r\n", x.pause()...)

	aof := readAOF(t, n.Dir)
	for _, want := range []string{"ZADD", "HSET", "HINCRBY", "ZREM", "lease_epoch",
		"$13\r\n" + strconv.FormatInt(deadline, 10) + "\r\n"} {
		if !bytes.Contains(aof, []byte(want)) {
			t.Errorf("AOF lacks %q", want)
		}
	}
	if bytes.Contains(bytes.ToLower(aof), []byte("emq.")) {
		t.Errorf("AOF holds an EMQ.* record:\n%q", aof)
	}

	before := snapshot(c)
	if err := n.Restart(n.Opts); err != nil {
		t.Fatalf("restart: %v", err)
	}
	c2 := dial(t, n.Addr)
	if after := snapshot(c2); !equalMap(before, after) {
		t.Errorf("keyspace after an AOF reload differs:\nbefore %q\nafter  %q", keysOf(before), keysOf(after))
	}
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
