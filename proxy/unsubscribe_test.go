package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// untilTag sends cmds and then PING tag in one write, and returns every
// reply's bytes up to (not including) the PING's: however many replies
// the commands got.
func (c *client) untilTag(tag string, cmds ...[]string) string {
	c.t.Helper()
	c.send(append(cmds, cmd("PING", tag))...)
	end := "$" + strconv.Itoa(len(tag)) + "\r\n" + tag + "\r\n"
	var b strings.Builder
	for {
		r := string(c.read().got)
		if r == end {
			return b.String()
		}
		b.WriteString(r)
	}
}

// unsubSteps are the unsubscribe family outside subscribe mode, each
// pipelined with a command whose reply must follow it.
var unsubSteps = [][][]string{
	{cmd("UNSUBSCRIBE"), cmd("GET", "k")},
	{cmd("UNSUBSCRIBE", "a", "b", "c"), cmd("GET", "k")},
	{cmd("unsubscribe", "x\r\ny", "")},
	{cmd("PUNSUBSCRIBE"), cmd("PUNSUBSCRIBE", "p*", "q?")},
	{cmd("SUNSUBSCRIBE"), cmd("SUNSUBSCRIBE", "{s}a", "b"), cmd("GET", "k")},
	// In subscribe mode they reach the server, on the client's own
	// connection (the last step: the node counts those).
	{cmd("SUBSCRIBE", "ch"), cmd("UNSUBSCRIBE", "ch", "other"), cmd("UNSUBSCRIBE", "again"), cmd("GET", "k")},
}

// TestUnsubscribeOutsideSubscribeModeMatchesTheServer: the unsubscribe
// family outside subscribe mode gets the server's own replies byte for
// byte, in RESP2 and RESP3 (per channel with a count of 0 on Redis 7.0,
// one NOSUB on Valkey 8), while another client's replies on the one
// shared connection stay its own, and nothing of it reaches the node.
func TestUnsubscribeOutsideSubscribeModeMatchesTheServer(t *testing.T) {
	node.EachServer(t, func(t *testing.T, srv node.Server) {
		direct := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		behind := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
		h := startProxy(t, behind, nil)
		for _, addr := range []string{direct.Addr, behind.Addr} {
			dial(t, addr).do("SET", "k", "v").is("+OK\r\n")
		}
		admin := dial(t, behind.Addr)
		calls := func() string {
			info := string(admin.do("INFO", "commandstats").got)
			var out []string
			for _, line := range strings.Split(info, "\r\n") {
				if strings.Contains(line, "unsubscribe:") {
					out = append(out, line)
				}
			}
			return strings.Join(out, " ")
		}
		before := calls()
		other := h.dial()
		for _, proto := range []string{"2", "3"} {
			d, c := dial(t, direct.Addr), h.dial()
			if proto == "3" {
				d.do("HELLO", "3")
				c.do("HELLO", "3")
			}
			for i, st := range unsubSteps[:len(unsubSteps)-1] {
				tag := "step-" + proto + "-" + strconv.Itoa(i)
				want, got := d.untilTag(tag, st...), c.untilTag(tag, st...)
				if want != got {
					t.Errorf("RESP%s %q:\n direct %q\n proxy  %q", proto, st, want, got)
				}
				other.do("SET", tag, tag).is("+OK\r\n")
				other.do("GET", tag).is("$" + strconv.Itoa(len(tag)) + "\r\n" + tag + "\r\n")
			}
			if !strings.Contains(d.untilTag("x", cmd("UNSUBSCRIBE", "a", "b")), "unsubscribe") {
				t.Errorf("RESP%s: the server's own reply never named the command", proto)
			}
		}
		if after := calls(); after != before {
			t.Errorf("the node ran the unsubscribe family:\n before %s\n after  %s", before, after)
		}
		for _, proto := range []string{"2", "3"} {
			d, c := dial(t, direct.Addr), h.dial()
			d.do("HELLO", proto)
			c.do("HELLO", proto)
			st := unsubSteps[len(unsubSteps)-1]
			if want, got := d.untilTag("sub", st...), c.untilTag("sub", st...); want != got {
				t.Errorf("RESP%s %q:\n direct %q\n proxy  %q", proto, st, want, got)
			}
		}
		// Inside MULTI: Valkey refuses it at queue time (EXECABORT), which
		// the proxy answers alike; Redis 7.0 would put the per-channel
		// replies in EXEC's array under a header that counts one, which the
		// proxy refuses, discarding the transaction as well.
		tx := [][]string{cmd("MULTI"), cmd("UNSUBSCRIBE", "a", "b"), cmd("PING"), cmd("EXEC")}
		want, got := dial(t, direct.Addr).untilTag("tx", tx...), h.dial().untilTag("tx", tx...)
		if strings.Contains(want, "-NOSUB") {
			if want != got {
				t.Errorf("MULTI:\n direct %q\n proxy  %q", want, got)
			}
		} else if got != "+OK\r\n-EMQREFUSED emqproxy answers 'UNSUBSCRIBE' itself and cannot queue it in MULTI\r\n"+
			"+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors.\r\n" {
			t.Errorf("MULTI through the proxy: %q", got)
		}
	})
}
