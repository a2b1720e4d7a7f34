package proxy

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// TestTrackingClientOnAScriptsDefaultPassesVerbCalls: a RESP3 client with
// CLIENT TRACKING on, whose default route is a scripts node (the middle of a
// migration), has its verb call planned as every other client's: passed to
// the scripts node as its own EVALSHA, never rewritten to EMQ.<VERB>.
func TestTrackingClientOnAScriptsDefaultPassesVerbCalls(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		r := startRoutedOn(t, srv.Path, func(o *Options) {
			o.Routes = []Route{{Queues: []string{"quotes*"}, Upstream: "module-a"}, {Queues: []string{"*"}, Upstream: "scripts-b"}}
		})
		m := testPolicy(t).Map
		if got := nodeDo(t, r.scripts, "SCRIPT", "LOAD", string(scripts.Body("pause"))); !strings.Contains(got, scriptSHA(m, "pause")) {
			t.Fatalf("load pause on the scripts node: %q", got)
		}
		c := r.dial()
		c.do("HELLO", "3").hasPrefix("%")
		c.do("CLIENT", "TRACKING", "ON").is("+OK\r\n") // bridged to scripts-b, the default route
		before := nodeStats(t, r.scripts)
		c.do(verbLine(m, "pause", "billing")...).is(":1\r\n")
		after := nodeStats(t, r.scripts)
		if after["evalsha"] != before["evalsha"]+1 {
			t.Errorf("the scripts node ran evalsha %d times, want %d", after["evalsha"], before["evalsha"]+1)
		}
		if st := nodeStats(t, r.module); st["emq.pause"] != 0 {
			t.Errorf("the module node ran emq.pause %d times", st["emq.pause"])
		}
		// The same call inside a transaction, queued and sent at EXEC.
		c.do("MULTI").is("+OK\r\n")
		c.do(verbLine(m, "pause", "billing")...).is("+QUEUED\r\n")
		c.do("EXEC").is("*1\r\n:0\r\n")
		if st := nodeStats(t, r.scripts); st["evalsha"] != before["evalsha"]+2 {
			t.Errorf("the scripts node ran evalsha %d times after EXEC, want %d", st["evalsha"], before["evalsha"]+2)
		}
	})
}

// TestTransactionQueuedBeforeAMoveGoesToTheNewOwner: a transaction whose
// commands were queued while their queue still belonged to one node, and
// that is sent (EXEC) after the queue moved, goes to the new owner: the
// route is planned at EXEC from what was queued.
func TestTransactionQueuedBeforeAMoveGoesToTheNewOwner(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		r := startControlledOn(t, srv.Path)
		c := r.dial()
		c.do("MULTI").is("+OK\r\n")
		c.do("SET", "emq:{billing}:x", "in-tx").is("+QUEUED\r\n")
		c.do("PING").is("+QUEUED\r\n") // keyless: goes with the transaction
		for _, epoch := range []struct {
			n     string
			state string
		}{{"3", "3 held scripts-b"}, {"4", "4 owned module-a"}} {
			for _, n := range []*node.Node{r.module, r.scripts} {
				nodeDo(t, n, "HSET", "{emqproxy}:queues", "billing", epoch.state)
				nodeDo(t, n, "SET", "{emqproxy}:epoch", epoch.n)
			}
		}
		r.waitApplied(t, r.scripts, 4)
		poll(t, "billing to route to module-a", func() bool { return r.srv.RouteFor("billing") == "module-a" })
		c.do("EXEC").is("*2\r\n+OK\r\n+PONG\r\n")
		if got := nodeDo(t, r.module, "GET", "emq:{billing}:x"); got != "$5\r\nin-tx\r\n" {
			t.Errorf("the new owner module-a has %q", got)
		}
		if got := nodeDo(t, r.scripts, "EXISTS", "emq:{billing}:x"); got != ":0\r\n" {
			t.Errorf("the old owner scripts-b got the transaction: EXISTS %q", got)
		}
		// The session is out of MULTI: a plain command runs at once.
		c.do("GET", "emq:{billing}:x").is("$5\r\nin-tx\r\n")
	})
}
