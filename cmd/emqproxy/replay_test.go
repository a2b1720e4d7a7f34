package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// writeCapture writes recs as one capture file in a new directory.
func writeCapture(t *testing.T, recs ...*capture.Record) string {
	t.Helper()
	dir := t.TempDir()
	w, err := capture.Open(capture.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		w.Add(r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// call is a captured script call of the stand's map.
func call(t *testing.T, seq uint64, name string, keys []string, vals []string, reply string) *capture.Record {
	t.Helper()
	m, err := shamap.Load(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := m.ByName(name)
	sha := strings.Repeat("ab", 20)
	if ok {
		sha = s.SHA
	}
	args := [][]byte{[]byte("EVALSHA"), []byte(sha), []byte{byte('0' + len(keys))}}
	for _, a := range append(append([]string{}, keys...), vals...) {
		args = append(args, []byte(a))
	}
	r := &capture.Record{Seq: seq, Time: time.Now(), Queue: "cq", Args: args, Reply: []byte(reply)}
	if ok {
		r.Script, r.Token = s.Name, s.Verb
	}
	return r
}

func enqueueAndClaim(t *testing.T) []*capture.Record {
	return []*capture.Record{
		call(t, 1, "enqueue", []string{"emq:{cq}:job:J1", "emq:{cq}:pending"}, []string{"J1", "p"}, ":1\r\n"),
		call(t, 2, "claim2", []string{"emq:{cq}:pending", "emq:{cq}:active"}, []string{"30000"}, "*3\r\n$2\r\nJ1\r\n$1\r\np\r\n:1\r\n"),
	}
}

// runReplayBinary runs `emqproxy verify --replay` and returns its output
// and exit code.
func runReplayBinary(t *testing.T, capDir string, sn, mn *node.Node) (string, int) {
	t.Helper()
	root := node.RepoRoot()
	return runBinary(t, "verify", "--replay", capDir, "--scripts", sn.Addr, "--module", mn.Addr,
		"--map", filepath.Join(root, "stand", "map.yaml"), "--bodies", filepath.Join(root, "stand", "scripts"))
}

// runBinary runs the binary with args and returns its output and exit code.
func runBinary(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestReplayExitCodes: 0 when both nodes agree, 1 when the module build
// differs (and the call is named), 2 with nothing sent on bad input.
func TestReplayExitCodes(t *testing.T) {
	node.Long(t)
	good := writeCapture(t, enqueueAndClaim(t)...)
	sn := node.StartT(t, node.Options{Role: node.Scripts})
	mn := node.StartT(t, node.Options{Role: node.Module})
	if out, code := runReplayBinary(t, good, sn, mn); code != 0 || !strings.Contains(out, "every call equal") {
		t.Errorf("sound build: exit %d:\n%s", code, out)
	}

	sn2 := node.StartT(t, node.Options{Role: node.Scripts})
	broken := node.StartT(t, node.Options{Role: node.Module, ModuleDefs: []string{"EMQ_BREAK_CLAIM"}})
	if out, code := runReplayBinary(t, good, sn2, broken); code != 1 || !strings.Contains(out, "call 2 (CLAIM") {
		t.Errorf("broken CLAIM: exit %d, want 1 naming call 2 (CLAIM):\n%s", code, out)
	}

	// Bad input: each exits 2, names the file and the record or offset,
	// and neither node gets a command.
	files, err := capture.Read(good)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	bad := func(name string, b []byte) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name+capture.Ext), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	corrupt := append([]byte{}, data...)
	corrupt[len(corrupt)-3] ^= 0x40
	version := append([]byte{}, data...)
	version[len(capture.Magic)+1] = 7
	headerOnly := writeCapture(t)
	unknown := writeCapture(t, call(t, 1, "nosuchscript", []string{"emq:{cq}:x"}, nil, ":1\r\n"))
	sn3 := node.StartT(t, node.Options{Role: node.Scripts})
	mn3 := node.StartT(t, node.Options{Role: node.Module})
	ctx := context.Background()
	before := [2]map[string]int64{}
	clients := [2]valkey.Client{sn3.Client(t), mn3.Client(t)}
	for i, c := range clients {
		if before[i], err = node.CommandStats(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, dir, want string }{
		{"corrupt", bad("corrupt", corrupt), "(record 2): checksum"},
		{"foreign", bad("foreign", []byte("*1\r\n$4\r\nPING\r\n")), "offset 0: no"},
		{"version", bad("version", version), "format version 7"},
		{"unknown sha", unknown, "record 1 (seq 1, queue \"cq\"): sha ababab"},
		{"no calls", headerOnly, "no calls captured"},
	} {
		out, code := runReplayBinary(t, tc.dir, sn3, mn3)
		if code != 2 || !strings.Contains(out, tc.want) || !strings.Contains(out, tc.dir) {
			t.Errorf("%s: exit %d, want 2 naming %s and %q:\n%s", tc.name, code, tc.dir, tc.want, out)
		}
	}
	for i, c := range clients {
		after, err := node.CommandStats(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		for cmd, calls := range after {
			if cmd != "info" && calls != before[i][cmd] {
				t.Errorf("%s node got %s on bad input (%d -> %d)", []string{"scripts", "module"}[i], cmd, before[i][cmd], calls)
			}
		}
	}
}

// POST /capture starts and stops a capture with the configured directory;
// the capture holds the calls sent meanwhile, redacted, and the metrics
// count them.
func TestServeCaptureOverTheAdminPort(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	capDir := filepath.Join(t.TempDir(), "capture")
	p := startProxy(t, up.Addr, "capture:\n  dir: "+strconv.Quote(capDir)+"\n")
	post := func(query string) (int, string) {
		resp, err := http.Post("http://"+p.admin+"/capture?"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("action=start"); code != 422 || !strings.Contains(body, "no queues") {
		t.Errorf("start without queues: %d %q", code, body)
	}
	if code, body := post("action=start&queues=cq"); code != 200 || !strings.Contains(body, `"running":true`) {
		t.Fatalf("start: %d %q", code, body)
	}
	m, err := shamap.Load(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	enq, _ := m.ByName("enqueue")
	if got := rawCommand(t, p.listen, "EVALSHA", enq.SHA, "2", "emq:{cq}:job:J1", "emq:{cq}:pending", "J1", "secret"); got != ":1\r\n" {
		t.Fatalf("enqueue: %q", got)
	}
	rawCommand(t, p.listen, "GET", "emq:{other}:paused")
	if code, body := post("action=stop"); code != 200 || !strings.Contains(body, `"records":1`) {
		t.Fatalf("stop: %d %q", code, body)
	}
	if v := p.metric(t, "emqproxy_capture_records_total"); v != 1 {
		t.Errorf("emqproxy_capture_records_total %v", v)
	}
	files, err := capture.Read(capDir)
	if err != nil {
		t.Fatal(err)
	}
	r := files[0].Records[0]
	if len(files[0].Records) != 1 || r.Token != "ENQUEUE" || string(r.Args[6]) == "secret" || len(r.Args[6]) != len("secret") || !files[0].Header.Redacted {
		t.Errorf("capture: %d records, first %q", len(files[0].Records), r.Args)
	}
}
