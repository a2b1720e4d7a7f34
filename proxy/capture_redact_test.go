package proxy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// captureBytes reads every capture file of dir, whole.
func captureBytes(t *testing.T, dir string) []byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*"+capture.Ext))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no capture file in %s (%v)", dir, err)
	}
	var all []byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

// A redacted capture of a RESP2 and a RESP3 session, each calling verbs,
// writing the queue's keys with plain commands (HSET on a job row, SET,
// XADD), reading them back and getting error replies that quote what they
// were sent, holds none of the data's bytes; equal values get equal
// stand-ins within the capture and other ones in the next capture.
func TestCaptureRedactsEveryProtocolAndCommandIntegration(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		n := node.StartT(t, node.Options{Role: node.Module, Server: srv.Path})
		dir := t.TempDir()
		h := startProxy(t, n, func(o *Options) {
			o.Capture = &CaptureOptions{Queues: []string{"rq"}, Dir: dir, Redact: true}
		})
		pol := testPolicy(t)
		enq, _ := pol.Map.ByName("enqueue")
		claim, _ := pol.Map.ByName("claim2")
		secrets := []string{"pay-7Q", "note-s3cret", "blob-s3cret", "event-s3cret", "group-s3cret"}

		session := func(c *client, id string, resp3 bool) {
			c.do("EVALSHA", enq.SHA, "2", "emq:{rq}:job:"+id, "emq:{rq}:pending", id, "pay-7Q").is(":1\r\n")
			c.do("EVALSHA", claim.SHA, "2", "emq:{rq}:pending", "emq:{rq}:active", "30000").
				is("*3\r\n$2\r\n" + id + "\r\n$6\r\npay-7Q\r\n:1\r\n")
			c.do("HSET", "emq:{rq}:job:"+id, "note", "note-s3cret").is(":1\r\n")
			c.do("SET", "emq:{rq}:blob", "blob-s3cret").is("+OK\r\n")
			c.do("GET", "emq:{rq}:blob").is("$11\r\nblob-s3cret\r\n")
			c.do("XADD", "emq:{rq}:events", "*", "data", "event-s3cret").hasPrefix("$")
			c.do("XINFO", "CONSUMERS", "emq:{rq}:events", "group-s3cret").hasPrefix("-NOGROUP ")
			c.do("XREADGROUP", "GROUP", "group-s3cret", "c1", "STREAMS", "emq:{rq}:events", ">").hasPrefix("-NOGROUP ")
			if resp3 {
				c.do("HGETALL", "emq:{rq}:job:"+id).hasPrefix("%5\r\n")
				c.do("GET", "emq:{rq}:missing").is("_\r\n")
			} else {
				c.do("HGETALL", "emq:{rq}:job:"+id).hasPrefix("*10\r\n")
			}
		}
		c2 := h.dial()
		session(c2, "J1", false)
		c3 := h.dial()
		c3.do("HELLO", "3").hasPrefix("%")
		session(c3, "J2", true)

		st, _, err := h.srv.StopCapture()
		if err != nil || st.Records != 19 || st.Dropped != 0 {
			t.Fatalf("capture %+v: %v", st, err)
		}
		raw := captureBytes(t, dir)
		for _, s := range secrets {
			if bytes.Contains(raw, []byte(s)) {
				t.Errorf("%q is in the redacted capture", s)
			}
		}
		files, err := capture.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		var enqueued, claimed [][]byte
		tokens := map[string]int{}
		for _, f := range files {
			for _, r := range f.Records {
				tokens[strings.ToUpper(string(r.Args[0]))]++
				switch r.Token {
				case "ENQUEUE":
					enqueued = append(enqueued, r.Args[6])
				case "CLAIM":
					v, err := resp.Parse(r.Reply)
					if err != nil || len(v.Elems) != 3 {
						t.Fatalf("CLAIM reply %q: %v", r.Reply, err)
					}
					claimed = append(claimed, v.Elems[1].Str)
				}
				if r.Token == "" && string(r.Args[0]) == "XINFO" && (string(r.Args[1]) != "CONSUMERS" || string(r.Args[2]) != "emq:{rq}:events") {
					t.Errorf("XINFO lost its subcommand or key: %q", r.Args)
				}
			}
		}
		for _, want := range []string{"EVALSHA", "HSET", "SET", "GET", "XADD", "XINFO", "XREADGROUP", "HGETALL"} {
			if tokens[want] == 0 {
				t.Errorf("no %s recorded: %v", want, tokens)
			}
		}
		if len(enqueued) != 2 || len(claimed) != 2 {
			t.Fatalf("%d ENQUEUE and %d CLAIM records", len(enqueued), len(claimed))
		}
		standIn := string(enqueued[0])
		for _, s := range [][]byte{enqueued[1], claimed[0], claimed[1]} {
			if string(s) != standIn {
				t.Errorf("stand-ins of one payload differ within a capture: %q and %q", standIn, s)
			}
		}

		// The next capture has a secret of its own.
		dir2 := t.TempDir()
		if err := h.srv.StartCapture(CaptureOptions{Queues: []string{"rq"}, Dir: dir2, Redact: true}); err != nil {
			t.Fatal(err)
		}
		c2.do("EVALSHA", enq.SHA, "2", "emq:{rq}:job:J3", "emq:{rq}:pending", "J3", "pay-7Q").is(":1\r\n")
		if _, _, err := h.srv.StopCapture(); err != nil {
			t.Fatal(err)
		}
		files, err = capture.Read(dir2)
		if err != nil || len(files) != 1 || len(files[0].Records) != 1 {
			t.Fatalf("second capture: %v", err)
		}
		if got := string(files[0].Records[0].Args[6]); got == standIn || len(got) != len("pay-7Q") {
			t.Errorf("second capture's stand-in %q (first %q)", got, standIn)
		}
	})
}

// Every capture start shares one budget over the capture directory: a
// second capture counts the first one's files and stops at the budget,
// and a start with nothing left is refused.
func TestCaptureBudgetSharedAcrossStartsIntegration(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Module})
	dir := t.TempDir()
	h := startProxy(t, n, nil)
	pol := testPolicy(t)
	enq, _ := pol.Map.ByName("enqueue")
	const budget = 20 << 10
	c := h.dial()
	run := func(from int) {
		t.Helper()
		if err := h.srv.StartCapture(CaptureOptions{Queues: []string{"bq"}, Dir: dir, MaxBytes: budget}); err != nil {
			t.Fatal(err)
		}
		for i := from; i < from+40; i++ {
			id := "J" + strconv.Itoa(i)
			c.do("EVALSHA", enq.SHA, "2", "emq:{bq}:job:"+id, "emq:{bq}:pending", id, strings.Repeat("p", 200)).hasPrefix(":")
		}
	}
	run(0)
	first, _, err := h.srv.StopCapture()
	if err != nil || first.Stopped != "" || first.Records != 40 {
		t.Fatalf("first capture %+v: %v", first, err)
	}
	run(40)
	second, _, err := h.srv.StopCapture()
	if err != nil || second.EarlierBytes != first.Bytes || second.Stopped == "" || second.Records == 40 {
		t.Fatalf("second capture %+v (first wrote %d bytes): %v", second, first.Bytes, err)
	}
	onDisk, err := capture.DirBytes(dir)
	if err != nil || onDisk > budget || onDisk != first.Bytes+second.Bytes {
		t.Errorf("%d bytes of captures on disk (%v), budget %d", onDisk, err, budget)
	}
	err = h.srv.StartCapture(CaptureOptions{Queues: []string{"bq"}, Dir: dir, MaxBytes: budget})
	if !errors.Is(err, ErrCapture) || !errors.Is(err, capture.ErrBudget) {
		t.Errorf("a start with the budget spent: %v", err)
	}
	if _, running := h.srv.CaptureStats(); running {
		t.Error("a refused start left a capture running")
	}
}
