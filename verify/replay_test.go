package verify_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/e2e"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/verify"
)

// workload drives a legacy client through every scripted verb on two
// queues, with failures (error replies, FAIL to dead), retries (a re-sent
// ENQUEUE, RETRY of a dead job), a paused queue (the host's pause read and
// no CLAIM sent) and the reads. Nothing in it depends on how much time
// passes (leases are long), so a replay must agree with production too.
func workload(t *testing.T, c *legacy.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	q, d := "rq1", "rq2"
	for _, id := range []string{"J1", "J2", "J3", "J4", "J5"} {
		_, err := c.Enqueue(ctx, q, id, "payload of "+id+" \x00\xff")
		must("enqueue", err)
	}
	_, err := c.Enqueue(ctx, q, "J1", "again")
	must("enqueue again", err)
	_, _, err = c.Claim(ctx, q, 30000) // J1
	must("claim", err)
	for _, lease := range []int64{60000, 45000, 90000} {
		_, err = c.Extend(ctx, q, "J1", lease)
		must("extend", err)
	}
	_, err = c.Eval(ctx, legacy.ScriptExtend, []string{legacy.Key(q, "active"), legacy.JobKey(q, "J1")}, []string{"J1", "soon"})
	must("extend with a bad lease", err)
	_, err = c.Complete(ctx, q, "J1")
	must("complete", err)
	_, err = c.Complete(ctx, q, "J1")
	must("complete again", err)
	_, _, err = c.Claim(ctx, q, 30000) // J2
	must("claim", err)
	_, err = c.Fail(ctx, q, "J2", "boom", 3, 0) // delayed, run-at now
	must("fail", err)
	_, err = c.Promote(ctx, q, 10)
	must("promote", err)
	_, err = c.Cancel(ctx, q, "J3")
	must("cancel", err)
	_, err = c.Cancel(ctx, q, "J3")
	must("cancel again", err)
	_, _, err = c.Claim(ctx, q, 30000) // J2, attempt 2
	must("claim", err)
	_, err = c.Reap(ctx, q, 10, 5) // nothing expired
	must("reap", err)
	_, err = c.Pause(ctx, q)
	must("pause", err)
	_, err = c.Pause(ctx, q)
	must("pause again", err)
	_, empty, err := c.Claim(ctx, q, 30000) // paused: the host reads the flag and sends nothing
	must("claim on a paused queue", err)
	if !empty {
		t.Fatal("claim on a paused queue got a job")
	}
	_, err = c.Resume(ctx, q)
	must("resume", err)
	_, err = c.Resume(ctx, q)
	must("resume again", err)
	_, err = c.Stats(ctx, q)
	must("stats", err)
	_, _, err = c.Peek(ctx, q, "J4")
	must("peek", err)
	_, err = c.Remove(ctx, q, "J4")
	must("remove", err)
	_, err = c.Remove(ctx, q, "J99")
	must("remove a missing job", err)

	_, err = c.Enqueue(ctx, d, "D1", "dead letter")
	must("enqueue", err)
	_, _, err = c.Claim(ctx, d, 30000)
	must("claim", err)
	_, err = c.Fail(ctx, d, "D1", "fatal", 1, 0) // dead
	must("fail to dead", err)
	_, err = c.Retry(ctx, d, "D1")
	must("retry", err)
	_, _, err = c.Claim(ctx, d, 30000)
	must("claim", err)
	_, err = c.Fail(ctx, d, "D1", "fatal again", 1, 0)
	must("fail to dead", err)
	_, err = c.Remove(ctx, d, "D1")
	must("remove a dead job", err)
	_, err = c.Stats(ctx, d)
	must("stats", err)
}

// captureWorkload runs the workload through a proxy (redaction on) in
// front of a sound module node and returns the capture directory.
func captureWorkload(t *testing.T) string {
	t.Helper()
	m := e2e.LoadMap(t)
	p := e2e.StartProxied(t, node.Redis(), m)
	dir := t.TempDir()
	if err := p.Proxy.StartCapture(proxy.CaptureOptions{Queues: []string{"rq*"}, Dir: dir, Redact: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := legacy.Dial(ctx, legacy.Options{Addr: p.Addr, Map: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	workload(t, c)
	if st, _, err := p.Proxy.StopCapture(); err != nil || st.Records == 0 || st.Dropped != 0 {
		t.Fatalf("capture: %+v %v", st, err)
	}
	return dir
}

// replay replays dir on a fresh scripts node and a fresh module node built
// with defs.
func replay(t *testing.T, dir string, defs ...string) verify.ReplayReport {
	t.Helper()
	m, bodies := standPaths(t)
	sn := node.StartT(t, node.Options{Role: node.Scripts, Brand: m.LegacyBrand})
	mn := node.StartT(t, node.Options{Role: node.Module, ModuleDefs: defs})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := verify.Replay(ctx, verify.ReplayConfig{Capture: dir, Scripts: sn.Addr, Module: mn.Addr, Map: m, BodiesDir: bodies})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	return rep
}

// The workload captured through the proxy replays equal on both nodes,
// call by call and key by key, and equal to what production saw.
func TestReplayCapturedWorkloadIntegration(t *testing.T) {
	dir := captureWorkload(t)
	files, err := capture.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]bool{}
	for _, r := range files[0].Records {
		tokens[r.Token] = true
		if strings.Contains(string(r.AppendBinary(nil)), "payload of") {
			t.Fatal("a payload is in the capture despite redaction")
		}
	}
	for _, tok := range []string{"ENQUEUE", "CLAIM", "EXTEND", "COMPLETE", "FAIL", "RETRY", "CANCEL", "PROMOTE", "REAP", "PAUSE", "RESUME", "REMOVE", ""} {
		if !tokens[tok] {
			t.Errorf("the capture has no %q call", tok)
		}
	}
	rep := replay(t, dir)
	t.Log("\n" + rep.String())
	if !rep.OK() || len(rep.Queues) != 2 || rep.Calls+rep.NotRun != len(files[0].Records) || rep.NotRun != 2 {
		t.Fatalf("replay not equal: ok %v, %d queues, %d calls and %d not run (the reads production got NOSCRIPT for, want 2) of %d", rep.OK(), len(rep.Queues), rep.Calls, rep.NotRun, len(files[0].Records))
	}
	for _, q := range rep.Queues {
		if q.Production != 0 {
			t.Errorf("queue %s: %d replies differ from production's", q.Queue, q.Production)
		}
	}
}

// Each scripted verb broken in the module build (-DEMQ_BREAK_<TOKEN>) is
// found at a call of that verb. RESCHEDULE and REQUEUE have no script, so
// legacy traffic never calls them: their builds replay equal.
func TestReplayFindsEachBrokenVerbIntegration(t *testing.T) {
	node.Long(t)
	if testing.Short() {
		t.Skip("builds the module fourteen times; skipped with -short")
	}
	dir := captureWorkload(t)
	for _, tok := range []string{"ENQUEUE", "CLAIM", "EXTEND", "COMPLETE", "FAIL", "RETRY", "CANCEL", "PROMOTE", "REAP", "PAUSE", "RESUME", "REMOVE", "RESCHEDULE", "REQUEUE"} {
		t.Run(tok, func(t *testing.T) {
			rep := replay(t, dir, "EMQ_BREAK_"+tok)
			if tok == "RESCHEDULE" || tok == "REQUEUE" {
				if !rep.OK() {
					t.Errorf("no call uses %s, yet the replay differs:\n%s", tok, rep)
				}
				return
			}
			if rep.OK() {
				t.Fatalf("EMQ_BREAK_%s not found:\n%s", tok, rep)
			}
			for _, q := range rep.Queues {
				if q.First != nil && q.First.Token != tok {
					t.Errorf("queue %s: first divergence at call %d (%s), want a %s call:\n%s", q.Queue, q.First.Index, q.First.Token, tok, rep)
				}
			}
			t.Logf("EMQ_BREAK_%s:\n%s", tok, rep)
		})
	}
}

// A capture cut in the middle of its last record replays up to the cut.
func TestReplayCutCaptureIntegration(t *testing.T) {
	dir := captureWorkload(t)
	files, err := capture.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), filepath.Base(files[0].Path))
	if err := os.WriteFile(cut, data[:len(data)-5], 0o644); err != nil {
		t.Fatal(err)
	}
	rep := replay(t, cut)
	if !rep.OK() || rep.Calls+rep.NotRun != len(files[0].Records)-1 || len(rep.Cuts) != 1 {
		t.Fatalf("cut capture: ok %v, %d calls (want %d), cuts %q", rep.OK(), rep.Calls+rep.NotRun, len(files[0].Records)-1, rep.Cuts)
	}
}
