package proxy

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// TestBridgeIsObservedAsNormalService: a bridged RESP3 client (tracking)
// gets what a client in normal service gets from the observer: the SCRIPT
// EXISTS patch, the SCRIPT LOAD fan-out to the other upstreams (a read
// body) and to the scripts nodes (a verb body), the capture of its
// commands with their replies, policy reloads, and audit records whose
// latency_us is the command's, not the connection's age.
func TestBridgeIsObservedAsNormalService(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		dir := t.TempDir()
		r := startRoutedOn(t, srv.Path, func(o *Options) {
			o.Capture = &CaptureOptions{Queues: []string{"cq*"}, Dir: dir}
		})
		m := testPolicy(t).Map
		enq, _ := m.ByName("enqueue")
		unknown := strings.Repeat("0", 40)
		c := r.dial()
		c.do("HELLO", "3").hasPrefix("%")
		c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n") // bridged to module-a
		plain := r.dial()
		want := string(plain.do("SCRIPT", "EXISTS", enq.SHA, unknown).got)
		if want != "*2\r\n:1\r\n:0\r\n" {
			t.Fatalf("normal service: SCRIPT EXISTS %q", want)
		}
		c.do("SCRIPT", "EXISTS", enq.SHA, unknown).is(want)

		c.do("SCRIPT", "LOAD", string(scripts.Body("stats"))).is("$40\r\n" + scriptSHA(m, "stats") + "\r\n")
		c.do("SCRIPT", "LOAD", string(scripts.Body("pause"))).is("$40\r\n" + scriptSHA(m, "pause") + "\r\n")
		for _, sc := range []struct {
			n    *node.Node
			sha  string
			want string
		}{
			{r.scripts, scriptSHA(m, "stats"), "*1\r\n:1\r\n"},
			{r.module, scriptSHA(m, "stats"), "*1\r\n:1\r\n"},
			{r.scripts, scriptSHA(m, "pause"), "*1\r\n:1\r\n"},
			{r.module, scriptSHA(m, "pause"), "*1\r\n:0\r\n"}, // no module node gets a verb body
		} {
			if got := nodeDo(t, sc.n, "SCRIPT", "EXISTS", sc.sha); got != sc.want {
				t.Errorf("node %s: SCRIPT EXISTS %s = %q, want %q", sc.n.Addr, sc.sha, got, sc.want)
			}
		}

		c.do("EVALSHA", enq.SHA, "2", "emq:{cq1}:job:J1", "emq:{cq1}:pending", "J1", "hello").is(":1\r\n")
		c.send(cmd("GET", "emq:{cq1}:paused"))
		c.readSkippingPushes().is("_\r\n") // an invalidation may come first (the enqueue's keys)
		if _, _, err := r.srv.StopCapture(); err != nil {
			t.Fatal(err)
		}
		files, err := capture.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range files {
			for _, rec := range f.Records {
				got = append(got, rec.Queue+" "+string(rec.Args[0])+" "+rec.Token+" "+strings.TrimSpace(string(rec.Reply)))
			}
		}
		if want := "cq1 EVALSHA ENQUEUE :1|cq1 GET  _"; strings.Join(got, "|") != want {
			t.Errorf("capture records %q, want %q", got, want)
		}

		c.do("STRLEN", "sk").is(":0\r\n")
		pol := *r.srv.Policy()
		pol.Deny = maps.Clone(rewrite.DefaultDeny)
		pol.Deny["STRLEN"] = true
		r.srv.SwapPolicy(&pol)
		c.do("STRLEN", "sk").hasPrefix("-DENIED ")

		c.do("EVALSHA", unknown, "0").hasPrefix("-EMQREFUSED ")
		gap := 300 * time.Millisecond
		time.Sleep(gap) // the connection ages; the next command's latency must not
		c.do("EVALSHA", unknown, "1", "k").hasPrefix("-EMQREFUSED ")
		var lats []float64
		poll(t, "the audit records of the refusals", func() bool {
			lats = lats[:0]
			for _, f := range r.audit.records(t) {
				if f["reason"] == string(rewrite.ReasonUnknownScript) {
					lats = append(lats, f["latency_us"].(float64))
				}
			}
			return len(lats) == 2
		})
		if lats[1] >= float64(gap.Microseconds()) {
			t.Errorf("the second refusal's latency_us is %v, past the %v between the two", lats[1], gap)
		}
	})
}

// TestBridgeCountsFailedAuthentications: a bridged client's wrong
// passwords count as in normal service: at the limit it is closed after
// its reply.
func TestBridgeCountsFailedAuthentications(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare, Password: "pw"})
	h := startProxy(t, n, func(o *Options) {
		o.Policy.Users = map[string]string{"default": "pw"}
		o.MaxAuthFailures = 2
		o.AuthFailDelay = time.Millisecond
	})
	c := h.dial()
	c.do("AUTH", "pw").is("+OK\r\n")
	c.do("HELLO", "3").hasPrefix("%")
	c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n")
	c.do("AUTH", "wrong").hasPrefix("-WRONGPASS")
	c.do("AUTH", "wrong").hasPrefix("-WRONGPASS")
	c.closed()
}

// readSkippingPushes reads the next reply that is not a RESP3 push.
func (c *client) readSkippingPushes() reply {
	c.t.Helper()
	for {
		r := c.read()
		if len(r.got) == 0 || r.got[0] != '>' {
			return r
		}
	}
}
