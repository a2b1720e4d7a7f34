package proxy

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// A decision case: one command and the outcome every session mode must
// give it.
type modeCase struct {
	name string
	// args builds the command; i tells the runs apart (a job id).
	args func(i int) []string
	// queue is the queue the command routes by ("" for none).
	queue string
	// want is the reply's prefix in every mode; wantTx, when set, in a
	// transaction instead (a "local" command).
	want, wantTx string
	// kind says what a transaction makes of it: "forwarded" (+QUEUED, the
	// reply inside EXEC's), "refused" (the reply at queue time, EXEC
	// EXECABORT), "local" (the proxy answers it itself: refused in MULTI),
	// "unavailable" (+QUEUED, EXEC gets the reply).
	kind string
	// check, when set, verifies the command's effect on the nodes after
	// each run (before, what it read before the run).
	before func(t *testing.T, r *routed) int64
	check  func(t *testing.T, r *routed, before int64, mode string)
}

// modeNames are the session modes each case runs in. RESP2 subscribe mode
// is not among them: only the subscribe commands and PING run there, and
// the server refuses the rest with its own text (TestSubscribeTranscriptMatchesDirect).
var modeNames = []string{"plain", "watch", "blocking", "transaction", "resp3", "tracking", "split"}

// runMode runs one case in one mode on a new client and returns the reply
// the case's command got (in a transaction: EXEC's, after checking the
// queue-time reply).
func runMode(t *testing.T, r *routed, mode string, c modeCase, i int) string {
	t.Helper()
	cl := r.dial()
	args := c.args(i)
	other := "emq:{billing}:z" // a key on the other upstream, for the split
	if strings.HasPrefix(c.queue, "billing") {
		other = "emq:{tq}:z"
	}
	watchKey := "wk"
	if c.queue != "" {
		watchKey = "emq:{" + c.queue + "}:w"
	}
	switch mode {
	case "plain":
	case "watch":
		cl.do("WATCH", watchKey) // held or unavailable with the case's upstream: then not pinned
	case "blocking":
		cl.do("BLPOP", "emq:{tq}:nolist", "0.01").is("*-1\r\n")
	case "resp3":
		cl.do("HELLO", "3").hasPrefix("%")
	case "tracking":
		cl.do("HELLO", "3").hasPrefix("%")
		cl.do("CLIENT", "TRACKING", "ON").is("+OK\r\n")
	case "transaction":
		cl.do("MULTI").is("+OK\r\n")
		q := string(cl.do(args...).got)
		exec := string(cl.do("EXEC").got)
		switch c.kind {
		case "forwarded", "unavailable":
			if q != "+QUEUED\r\n" {
				t.Errorf("%s in a transaction: queued as %q", c.name, q)
			}
			if c.kind == "unavailable" {
				return exec
			}
			if !strings.HasPrefix(exec, "*1\r\n") {
				t.Errorf("%s in a transaction: EXEC %q", c.name, exec)
				return exec
			}
			return exec[len("*1\r\n"):]
		case "refused", "local":
			if !strings.HasPrefix(exec, "-EXECABORT") {
				t.Errorf("%s in a transaction: EXEC %q, want EXECABORT", c.name, exec)
			}
			return q
		}
	case "split":
		cl.send(cmd("GET", other), args)
		cl.read().is("$-1\r\n")
		return string(cl.readSkippingPushes().got)
	}
	return string(cl.readSkippingPushesAfter(args).got)
}

// readSkippingPushesAfter sends args and reads its reply, skipping pushes.
func (c *client) readSkippingPushesAfter(args []string) reply {
	c.t.Helper()
	c.send(args)
	return c.readSkippingPushes()
}

// TestDecisionsAreTheSameInEverySessionMode runs the decision cases through
// every session mode against real servers (a module node, a scripts node,
// the control table, the fence probe): each mode goes through the one plan
// and gets the same outcome.
func TestDecisionsAreTheSameInEverySessionMode(t *testing.T) {
	node.Long(t)
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		r := startRoutedOn(t, srv.Path, func(o *Options) {
			o.Routes = []Route{{Queues: []string{"billing*"}, Upstream: "scripts-b"}, {Queues: []string{"*"}, Upstream: "module-a"}}
			o.Control = &ControlOptions{Poll: 50 * time.Millisecond, Lease: 2 * time.Second, Hold: 150 * time.Millisecond, ID: "p1"}
			for i := range o.Upstreams {
				o.Upstreams[i].ProbeInterval = 20 * time.Millisecond
			}
		})
		r.waitApplied(t, r.module, 0)
		m := testPolicy(t).Map
		enq, _ := m.ByName("enqueue")
		pauseSHA := scriptSHA(m, "pause")
		fixed := func(a ...string) func(int) []string { return func(int) []string { return a } }
		stat := func(n func(*routed) *node.Node, name string) func(*testing.T, *routed) int64 {
			return func(t *testing.T, r *routed) int64 { return nodeStats(t, n(r))[name] }
		}
		mod := func(r *routed) *node.Node { return r.module }
		cases := []modeCase{
			{name: "rewrite", queue: "tq", kind: "forwarded", want: ":1\r\n",
				args: func(i int) []string {
					j := "J" + strconv.Itoa(i)
					return []string{"EVALSHA", enq.SHA, "2", "emq:{tq}:job:" + j, "emq:{tq}:pending", j, "p"}
				},
				before: stat(mod, "emq.enqueue"),
				check: func(t *testing.T, r *routed, before int64, mode string) {
					if got := nodeStats(t, r.module)["emq.enqueue"]; got != before+1 {
						t.Errorf("rewrite (%s): the module node ran emq.enqueue %d times, want %d", mode, got-before, 1)
					}
				}},
			{name: "refusal", queue: "", kind: "refused", want: "-EMQREFUSED emqproxy does not forward 'ACL LIST': shared-connection rule secret",
				args: fixed("ACL", "LIST")},
			{name: "version key", queue: "", kind: "refused", want: "-FENCE {emq}:version belongs to emqproxy",
				args: fixed("SET", "{emq}:version", "acme:1.0.0"),
				check: func(t *testing.T, r *routed, _ int64, mode string) {
					if got := nodeDo(t, r.module, "GET", "{emq}:version"); got != "$12\r\nechomq:6.0.0\r\n" {
						t.Errorf("version key (%s): the module node's brand is %q", mode, got)
					}
				}},
			{name: "deny", queue: "", kind: "refused", want: "-DENIED emqproxy does not forward 'FLUSHDB'",
				args: fixed("FLUSHDB")},
			{name: "cross-route", queue: "tq", kind: "refused", want: "-CROSSROUTE the keys of 'MSET' route to upstreams module-a and scripts-b",
				args: fixed("MSET", "emq:{tq}:a", "1", "emq:{billing}:a", "1"),
				check: func(t *testing.T, r *routed, _ int64, mode string) {
					if got := nodeDo(t, r.module, "EXISTS", "emq:{tq}:a"); got != ":0\r\n" {
						t.Errorf("cross-route (%s): the module node has the key", mode)
					}
				}},
			{name: "unknown sha", queue: "", kind: "refused", want: "-EMQREFUSED ",
				args: fixed("EVALSHA", strings.Repeat("0", 40), "0")},
			{name: "SCRIPT LOAD", queue: "", kind: "local", want: "$40\r\n" + pauseSHA + "\r\n",
				wantTx: "-EMQREFUSED emqproxy answers 'SCRIPT LOAD' itself and cannot queue it in MULTI",
				args:   fixed("SCRIPT", "LOAD", string(scripts.Body("pause"))),
				check: func(t *testing.T, r *routed, _ int64, mode string) {
					want := "*1\r\n:1\r\n"
					if mode == "transaction" {
						want = "*1\r\n:0\r\n"
					}
					if got := nodeDo(t, r.scripts, "SCRIPT", "EXISTS", pauseSHA); got != want {
						t.Errorf("SCRIPT LOAD (%s): the scripts node's SCRIPT EXISTS %q, want %q", mode, got, want)
					}
					nodeDo(t, r.scripts, "SCRIPT", "FLUSH")
				}},
			{name: "held queue", queue: "heldq", kind: "refused", want: "-TRYAGAIN queue heldq is moving",
				args: fixed("SET", "emq:{heldq}:x", "1")},
		}
		nodeDo(t, r.module, "HSET", "{emqproxy}:queues", "heldq", "3 held module-a")
		nodeDo(t, r.module, "SET", "{emqproxy}:epoch", "3")
		r.waitApplied(t, r.module, 3)
		run := func(cases []modeCase) {
			for ci, c := range cases {
				for mi, mode := range modeNames {
					var before int64
					if c.before != nil {
						before = c.before(t, r)
					}
					got := runMode(t, r, mode, c, ci*100+mi)
					want := c.want
					if mode == "transaction" && c.wantTx != "" {
						want = c.wantTx
					}
					if !strings.HasPrefix(got, want) {
						t.Errorf("%s in mode %s: %q, want %q", c.name, mode, got, want)
					}
					if c.check != nil {
						c.check(t, r, before, mode)
					}
				}
			}
		}
		run(cases)

		// The fence fails on the scripts node: every mode gets its error.
		if _, err := node.RawDo(r.scripts.Addr, "SET", "{emq}:version", "acme:1.0.0"); err != nil {
			t.Fatal(err)
		}
		poll(t, "the probe to fail the scripts node's fence", func() bool {
			return errors.Is(r.srv.Readiness(), fence.ErrForeignBrand)
		})
		run([]modeCase{{name: "fence failed", queue: "billing", kind: "unavailable", want: "-UPSTREAM scripts-b unavailable: ",
			args: fixed("SET", "emq:{billing}:x", "1"),
			check: func(t *testing.T, r *routed, _ int64, mode string) {
				if got := nodeDo(t, r.scripts, "EXISTS", "emq:{billing}:x"); got != ":0\r\n" {
					t.Errorf("fence failed (%s): the write reached the unfenced node", mode)
				}
			}}})
	})
}
