package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// queueErrorCases are commands the server refuses at queue time inside
// MULTI, or refuses there without flagging the transaction (a nested MULTI,
// WATCH): every text and every EXEC outcome is the server's, read from a
// direct connection.
var queueErrorCases = []struct {
	name string
	bad  []string
}{
	{"unknown command", cmd("NOSUCHCOMMAND", "a", "b")},
	{"unknown command without arguments", cmd("nosuchcommand")},
	{"unknown command, arguments past 128 bytes", cmd("NOSUCH", "a\r\nb", strings.Repeat("x", 200), "tail")},
	{"unknown command, many short arguments", append(cmd("NOSUCH"), strings.Fields(strings.Repeat("abcde ", 40))...)},
	{"unknown command, an argument ending at 128 bytes", cmd("NOSUCH", strings.Repeat("z", 123), "next")},
	{"unknown command, NUL bytes", cmd("NOSUCH\x00zz", "a\x00b", "c")},
	{"unknown command, a 300-byte name", cmd(strings.Repeat("N", 300), "a")},
	{"unknown command, CR LF in the name", cmd("NO\r\nSUCH", "x\ny")},
	{"unknown subcommand", cmd("CONFIG", "NOPE", "x")},
	{"unknown subcommand, mixed case, 300 bytes", cmd("ConFig", strings.Repeat("y", 300))},
	{"unknown subcommand, NUL and CR LF", cmd("object", "NO\x00PE\r\n", "k")},
	{"wrong arity, too few", cmd("GET")},
	{"wrong arity, too many", cmd("GET", "a", "b")},
	{"wrong arity, mixed case", cmd("sEt", "a")},
	{"wrong arity of a subcommand", cmd("CONFIG", "GET")},
	{"wrong arity of a container alone", cmd("CONFIG")},
	{"no-multi", cmd("SAVE")},
	{"no-multi with a wrong arity", cmd("save", "x")},
	{"nested MULTI", cmd("MULTI")},
	{"nested MULTI with an argument", cmd("MULTI", "x")},
	{"WATCH inside MULTI", cmd("WATCH", "k")},
}

// queueErrorSequence is what each case sends: the bad command twice (the
// second after the transaction may be flagged), a good command around it,
// EXEC, and a read of what EXEC did.
func queueErrorSequence(bad []string, i int) [][]string {
	key := "tq" + strconv.Itoa(i)
	return [][]string{
		cmd("MULTI"), cmd("SET", key, "queued"), bad, cmd("INCR", "tqn"), bad, cmd("EXEC"),
		cmd("GET", key), cmd("GET", "tqn"),
	}
}

// runSequence sends seq on c, each command in its own round trip or all in
// one write, and returns every reply.
func runSequence(c *client, seq [][]string, pipelined bool) []string {
	out := make([]string, 0, len(seq))
	if pipelined {
		c.send(seq...)
		for range seq {
			out = append(out, string(c.read().got))
		}
		return out
	}
	for _, args := range seq {
		out = append(out, string(c.do(args...).got))
	}
	return out
}

func TestQueueTimeErrorsMatchTheServer(t *testing.T) {
	direct := node.StartT(t, node.Options{Role: node.Bare})
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	for _, mode := range []string{"interactive", "pipelined"} {
		pipelined := mode == "pipelined"
		d, p := dial(t, direct.Addr), h.dial()
		for i, tc := range queueErrorCases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				seq := queueErrorSequence(tc.bad, i)
				want := runSequence(d, seq, pipelined)
				got := runSequence(p, seq, pipelined)
				for j := range seq {
					if got[j] != want[j] {
						t.Errorf("%q:\n direct %q\n proxy  %q", seq[j], want[j], got[j])
					}
				}
				if !strings.HasPrefix(want[2], "-") {
					t.Errorf("the server queued %q: %q", tc.bad, want[2])
				}
			})
		}
		// Both connections are still in step: nothing is left queued.
		d.do("GET", "tqn").is(string(p.do("GET", "tqn").got))
	}
}

func TestQueueTimeErrorsKeepWatchSemantics(t *testing.T) {
	direct := node.StartT(t, node.Options{Role: node.Bare})
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	type line struct {
		other bool // sent by the second client
		args  []string
	}
	a := func(args ...string) line { return line{args: args} }
	b := func(args ...string) line { return line{other: true, args: args} }
	script := []line{
		// A queue-time error wins over a failed WATCH: EXECABORT, not nil.
		a("WATCH", "w"), b("SET", "w", "changed"), a("MULTI"), a("NOSUCHCOMMAND", "x"), a("SET", "w", "mine"), a("EXEC"),
		a("GET", "w"),
		// EXECABORT ended the WATCH: a later change does not fail the next EXEC.
		b("SET", "w", "again"), a("MULTI"), a("SET", "w", "mine"), a("EXEC"), a("GET", "w"),
		// A nested MULTI does not flag the transaction: the failed WATCH
		// still answers nil.
		a("WATCH", "w"), b("SET", "w", "changed"), a("MULTI"), a("MULTI"), a("SET", "w", "mine"), a("EXEC"),
		a("GET", "w"),
		// An unchanged WATCH with a nested MULTI and WATCH inside: EXEC applies.
		a("WATCH", "w"), a("MULTI"), a("MULTI"), a("WATCH", "w"), a("SET", "w", "mine2"), a("EXEC"), a("GET", "w"),
		// Arity and no-multi errors under WATCH, then DISCARD.
		a("WATCH", "w"), a("MULTI"), a("GET"), a("SAVE"), a("DISCARD"), a("EXEC"),
		b("SET", "w", "later"), a("MULTI"), a("SET", "w", "last"), a("EXEC"), a("GET", "w"),
	}
	run := func(ca, cb *client) []string {
		var out []string
		for _, l := range script {
			c := ca
			if l.other {
				c = cb
			}
			out = append(out, string(c.do(l.args...).got))
		}
		return out
	}
	want := run(dial(t, direct.Addr), dial(t, direct.Addr))
	got := run(h.dial(), h.dial())
	for i, l := range script {
		if got[i] != want[i] {
			t.Errorf("step %d %q:\n direct %q\n proxy  %q", i, l.args, want[i], got[i])
		}
	}
	if want[5] != "-EXECABORT Transaction discarded because of previous errors.\r\n" || want[17] != "*-1\r\n" {
		t.Errorf("the server's transcript is not the one the test is about: %q", want)
	}
}

func TestQueueTimeRefusalsAreCounted(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	c.do("MULTI").is("+OK\r\n")
	c.do("NOSUCHCOMMAND").hasPrefix("-ERR unknown command 'NOSUCHCOMMAND'")
	c.do("SAVE").is("-ERR Command not allowed inside a transaction\r\n")
	c.do("GET").is("-ERR wrong number of arguments for 'get' command\r\n")
	c.do("EXEC").is("-EXECABORT Transaction discarded because of previous errors.\r\n")
	// Nothing of the transaction reached the server.
	stats, err := node.CommandStats(t.Context(), n.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"multi", "exec", "save"} {
		if stats[name] != 0 {
			t.Errorf("%s reached the upstream %d times", name, stats[name])
		}
	}
	for reason, want := range map[string]float64{"unknown_command": 1, "no_multi": 1, "arity": 1} {
		if got := counterValue(t, h.srv.met.Refusals.WithLabelValues(reason)); got != want {
			t.Errorf("refusals{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}
