package observe

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

func TestCaptureStartRefuses(t *testing.T) {
	var c Capture
	dir := t.TempDir()
	for _, o := range []CaptureOptions{
		{Queues: []string{"q"}},
		{Dir: dir},
		{Dir: dir, Queues: []string{"["}},
		{Dir: dir, Queues: []string{""}},
	} {
		if err := c.Start(o, "", zap.NewNop()); !errors.Is(err, ErrCapture) {
			t.Errorf("Start(%+v) = %v, want ErrCapture", o, err)
		}
	}
	if err := c.Start(CaptureOptions{Dir: dir, Queues: []string{"q"}}, "", zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(CaptureOptions{Dir: t.TempDir(), Queues: []string{"q"}}, "", zap.NewNop()); !errors.Is(err, ErrCapture) {
		t.Errorf("a second Start = %v, want ErrCapture", err)
	}
	if _, running, err := c.Stop(zap.NewNop()); !running || err != nil {
		t.Errorf("Stop = %v, %v", running, err)
	}
	if _, running, _ := c.Stop(zap.NewNop()); running {
		t.Error("a second Stop found a capture running")
	}
}

// TestCaptureSession is a session's records: forwarded commands of the
// captured queues with their replies, a bridged one, and what is not
// recorded.
func TestCaptureSession(t *testing.T) {
	var c Capture
	var keys cmdtable.Store
	reg := prometheus.NewRegistry()
	if err := c.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := c.Start(CaptureOptions{Dir: dir, Queues: []string{"cq*"}}, "digest", zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if gauge(t, reg, "emqproxy_capture_active") != 1 {
		t.Error("emqproxy_capture_active is not 1 while a capture runs")
	}
	o := NewSession(Config{Conn: 9, Log: zap.NewNop(), Capture: &c, Keys: &keys})
	began := time.Now()
	enq := &shamap.Script{Name: "enqueue", Verb: "ENQUEUE"}

	// Slot 0: a script call of cq1; slot 1: a plain command of cq2; slot 2:
	// another queue; slot 3: a subscribe; slot 4: never answered.
	o.Forwarded(0, args("EVALSHA", "s", "1", "emq:{cq1}:job:1"), &rewrite.Decision{Action: rewrite.Rewrite, Script: enq, SHA: "s", Queue: []byte("cq1")}, nil, began)
	o.Forwarded(1, args("HGET", "emq:{cq2}:job:1", "f"), &rewrite.Decision{Action: rewrite.Pass}, nil, began)
	o.Forwarded(2, args("HGET", "emq:{other}:job:1", "f"), &rewrite.Decision{Action: rewrite.Pass}, nil, began)
	o.Forwarded(3, args("SSUBSCRIBE", "emq:{cq1}:x"), &rewrite.Decision{Action: rewrite.Pass, Effect: rewrite.Subscribe}, nil, began)
	o.Forwarded(4, args("GET", "emq:{cq1}:y"), &rewrite.Decision{Action: rewrite.Pass}, nil, began)
	pend := o.Awaiting()
	if len(pend) != 3 || pend[0].Slot != 0 || pend[1].Slot != 1 || pend[2].Slot != 4 {
		t.Fatalf("Awaiting = %+v, want slots 0, 1 and 4", pend)
	}
	now := time.Now()
	o.Finish(pend[0], []byte("$2\r\nJ1\r\n"), now)
	o.Finish(pend[1], []byte("$1\r\nv\r\n"), now)
	o.Publish()
	if len(o.Awaiting()) != 0 {
		t.Error("records still awaited after Publish")
	}

	// On the bridge: the relay finishes the record.
	if r := o.Bridged(args("GET", "emq:{nope}:x"), &rewrite.Decision{Action: rewrite.Pass}, began); r.Wanted() {
		t.Error("a bridged command of another queue is captured")
	}
	a := args("LLEN", "emq:{cq3}:pending")
	r := o.Bridged(a, &rewrite.Decision{Action: rewrite.Pass}, began)
	a[1][0] = 'X' // the session reads again: the record has its copy
	r.Reply([]byte(":3\r\n"))
	Captured{}.Reply([]byte(":0\r\n")) // the zero record records nothing
	o.End()

	st, _, err := c.Stop(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 3 {
		t.Errorf("%d records written, want 3", st.Records)
	}
	files, err := capture.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var recs []capture.Record
	for _, f := range files {
		if f.Header.MapDigest != "digest" {
			t.Errorf("map digest %q", f.Header.MapDigest)
		}
		recs = append(recs, f.Records...)
	}
	slices.SortFunc(recs, func(a, b capture.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	var got []string
	for _, rec := range recs {
		if rec.Conn != 9 {
			t.Errorf("record %d: conn %d, want 9", rec.Seq, rec.Conn)
		}
		var as []string
		for _, x := range rec.Args {
			as = append(as, string(x))
		}
		got = append(got, rec.Queue+" "+rec.Script+" "+rec.Token+" "+strings.Join(as, " ")+" -> "+strings.TrimSpace(string(rec.Reply)))
	}
	want := []string{
		"cq1 enqueue ENQUEUE EVALSHA s 1 emq:{cq1}:job:1 -> $2\r\nJ1",
		"cq2   HGET emq:{cq2}:job:1 f -> $1\r\nv",
		"cq3   LLEN emq:{cq3}:pending -> :3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if gauge(t, reg, "emqproxy_capture_active") != 0 {
		t.Error("emqproxy_capture_active is not 0 after Stop")
	}
}

// TestCaptureRestarted: a session whose stream belongs to a stopped capture
// records into the next one.
func TestCaptureRestarted(t *testing.T) {
	var c Capture
	var keys cmdtable.Store
	o := NewSession(Config{Log: zap.NewNop(), Capture: &c, Keys: &keys})
	d := &rewrite.Decision{Action: rewrite.Pass}
	for i, dir := range []string{t.TempDir(), t.TempDir()} {
		if err := c.Start(CaptureOptions{Dir: dir, Queues: []string{"*"}}, "", zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		o.Forwarded(0, args("GET", "emq:{q}:k"), d, nil, time.Now())
		o.Finish(o.Awaiting()[0], []byte("$-1\r\n"), time.Now())
		o.Publish()
		st, _, err := c.Stop(zap.NewNop())
		if err != nil || st.Records != 1 {
			t.Errorf("capture %d: %d records, %v; want 1", i, st.Records, err)
		}
	}
	o.End()
}

// TestForwardedNoCapture: with no capture running, Forwarded records
// nothing and allocates nothing.
func TestForwardedNoCapture(t *testing.T) {
	var c Capture
	o := NewSession(Config{Log: zap.NewNop(), Capture: &c})
	a := args("GET", "emq:{q}:k")
	d := &rewrite.Decision{Action: rewrite.Pass}
	began := time.Now()
	n := testing.AllocsPerRun(100, func() {
		o.Forwarded(0, a, d, nil, began)
		o.Publish()
	})
	if n != 0 || len(o.Awaiting()) != 0 {
		t.Errorf("%v allocations, %d records awaited; want none", n, len(o.Awaiting()))
	}
}

// gauge is the value of the metric name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
