package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/stand/node"
)

// A capture records, for the queues it names, each forwarded command in
// the client's form with the upstream's reply, in order; nothing else.
func TestCaptureRecordsForwardedCommandsIntegration(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	h := startProxy(t, n, func(o *Options) {
		o.Registry = reg
		o.Capture = &CaptureOptions{Queues: []string{"cq*"}, Dir: dir, Redact: false}
	})
	pol := testPolicy(t)
	enq, _ := pol.Map.ByName("enqueue")
	c := h.dial()
	c.do("EVALSHA", enq.SHA, "2", "emq:{cq1}:job:J1", "emq:{cq1}:pending", "J1", "hello").is(":1\r\n")
	c.do("EVALSHA", enq.SHA, "2", "emq:{other}:job:J1", "emq:{other}:pending", "J1", "x").is(":1\r\n")
	c.do("GET", "emq:{cq1}:paused").is("$-1\r\n")
	c.do("SET", "plain", "1").is("+OK\r\n")
	c.do("PING").is("+PONG\r\n")
	c.do("EVALSHA", strings.Repeat("0", 40), "0").hasPrefix("-")
	c.send(cmd("MULTI"), cmd("GET", "emq:{cq1}:paused"), cmd("EXEC"))
	c.read().is("+OK\r\n")
	c.read().is("+QUEUED\r\n")
	c.read().is("*1\r\n$-1\r\n")
	// A pipeline: both calls recorded, in order.
	c.send(cmd("EVALSHA", enq.SHA, "2", "emq:{cq2}:job:J2", "emq:{cq2}:pending", "J2", "p2"),
		cmd("EVALSHA", enq.SHA, "2", "emq:{cq2}:job:J2", "emq:{cq2}:pending", "J2", "p2"))
	c.read().is(":1\r\n")
	c.read().is(":0\r\n")

	st, running := h.srv.CaptureStats()
	if !running || st.Dir != dir {
		t.Fatalf("capture stats %+v running %v", st, running)
	}
	if err := h.srv.StartCapture(CaptureOptions{Queues: []string{"*"}, Dir: t.TempDir()}); !errors.Is(err, ErrCapture) {
		t.Errorf("a second capture: %v", err)
	}
	st, running, err := h.srv.StopCapture()
	if err != nil || !running || st.Records != 4 {
		t.Fatalf("stop: %+v %v %v", st, running, err)
	}
	files, err := capture.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range files[0].Records {
		got = append(got, r.Queue+" "+string(r.Args[0])+" "+r.Token+" "+strings.TrimSpace(string(r.Reply)))
		if r.Time.IsZero() || r.Conn == 0 {
			t.Errorf("record %d: no time or connection: %+v", r.Seq, r)
		}
	}
	want := []string{"cq1 EVALSHA ENQUEUE :1", "cq1 GET  $-1", "cq2 EVALSHA ENQUEUE :1", "cq2 EVALSHA ENQUEUE :0"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("records\n %q\nwant\n %q", got, want)
	}
	if r := files[0].Records[0]; string(r.Args[6]) != "hello" || r.Script != "enqueue" {
		t.Errorf("first record %q", r.Args)
	}
	if v := testutil.ToFloat64(metricNamed(t, reg, "emqproxy_capture_records_total")); v != 4 {
		t.Errorf("emqproxy_capture_records_total %v", v)
	}
	// Stopped: nothing more is recorded, and stopping again is a no-op.
	c.do("GET", "emq:{cq1}:paused").is("$-1\r\n")
	if _, running, _ := h.srv.StopCapture(); running {
		t.Error("a stopped capture still running")
	}
}

// metricNamed gathers reg and returns a collector for the named metric's
// single value.
func metricNamed(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			v := mf.Metric[0].GetCounter().GetValue()
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "copy"}, func() float64 { return v })
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}
