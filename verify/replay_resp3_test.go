package verify_test

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/e2e"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// A redacted capture of a RESP3 session (nulls, maps, error replies, plain
// commands on the queue's keys next to the verbs) replays equal on both
// nodes and equal to production, compared as the RESP2 replies the replay
// gets; nothing of the session's data is in the capture.
func TestReplayRedactedRESP3CaptureIntegration(t *testing.T) {
	m := e2e.LoadMap(t)
	p := e2e.StartProxied(t, node.Redis(), m)
	dir := t.TempDir()
	if err := p.Proxy.StartCapture(proxy.CaptureOptions{Queues: []string{"r3"}, Dir: dir, Redact: true}); err != nil {
		t.Fatal(err)
	}
	nc, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(nc)
	do := func(wantPrefix string, args ...string) {
		t.Helper()
		if _, err := nc.Write(resp.AppendCommand(nil, args...)); err != nil {
			t.Fatal(err)
		}
		r, err := resp.ReadReply(br)
		if err != nil || !strings.HasPrefix(string(r), wantPrefix) {
			t.Fatalf("%q: %q %v, want prefix %q", args, r, err, wantPrefix)
		}
	}
	sha := func(name string) string {
		s, ok := m.ByName(name)
		if !ok {
			t.Fatalf("no %s in the map", name)
		}
		return s.SHA
	}
	do("%", "HELLO", "3")
	do(":1", "EVALSHA", sha("enqueue"), "2", "emq:{r3}:job:J1", "emq:{r3}:pending", "J1", "resp3-secret-payload")
	do("_", "GET", "emq:{r3}:paused")
	do("*3", "EVALSHA", sha("claim2"), "2", "emq:{r3}:pending", "emq:{r3}:active", "600000")
	do("$20", "HGET", "emq:{r3}:job:J1", "payload")
	do(":1", "HSET", "emq:{r3}:meta", "owner", "resp3-secret-owner")
	do("%1", "HGETALL", "emq:{r3}:meta")
	do("-WRONGTYPE", "LPUSH", "emq:{r3}:meta", "resp3-secret-item")
	do(":0", "EVALSHA", sha("fail"), "4", "emq:{r3}:active", "emq:{r3}:job:J1", "emq:{r3}:delayed", "emq:{r3}:dead",
		"J1", "resp3-secret-error", "1", "0")
	do("_", "GET", "emq:{r3}:missing")
	if st, _, err := p.Proxy.StopCapture(); err != nil || st.Records != 9 || st.Dropped != 0 {
		t.Fatalf("capture %+v: %v", st, err)
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.emqcap"))
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte("resp3-secret")) {
			t.Fatalf("%s holds the session's data", path)
		}
	}
	rep := replay(t, dir)
	t.Log("\n" + rep.String())
	if !rep.OK() || rep.Calls != 9 || len(rep.Queues) != 1 {
		t.Fatalf("replay not equal: ok %v, %d calls, %d queues", rep.OK(), rep.Calls, len(rep.Queues))
	}
	if q := rep.Queues[0]; q.Production != 0 {
		t.Errorf("%d replies differ from production's: %+v", q.Production, q.ProductionFirst)
	}
}
