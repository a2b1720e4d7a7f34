package moduletest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestRandomInput sends every EMQ.* command with 0 to 8 arguments of random
// shapes (numkeys strings, queue keys, row keys, integers, binary junk) a
// few thousand times, then checks the server still answers and still
// serves a well-formed call.
func TestRandomInput(t *testing.T) { node.EachServer(t, testRandomInput) }

func testRandomInput(t *testing.T, srv node.Server) {
	n, c := startModule(t, node.Options{Server: srv.Path})
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	seedQueue(c, "a")

	commands := []string{"EMQ.VERSION", "EMQ.INSTALL"}
	for _, s := range shapes {
		commands = append(commands, "EMQ."+s.token)
	}
	roles := []string{"job:J1", "job:J2", "job:", "pending", "active", "delayed", "done", "dead", "paused", "version"}
	queues := []string{"a", "b", "", "a}", "{a", "a:b"}
	numkeys := []string{"-1", "0", "1", "2", "3", "4", "6", "7", "8", "99", "x", "", "1.0", "+1", "01",
		"9223372036854775807", "-9223372036854775808", "9223372036854775808"}
	ints := []string{"0", "1", "3", "1000", "9007199254740991", "9007199254740992", "-5", "1e3", " 7", "18446744073709551616"}
	junk := func() string {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return string(b)
	}
	randArg := func(pos int) string {
		if pos == 0 && rng.IntN(4) > 0 {
			return numkeys[rng.IntN(len(numkeys))]
		}
		switch rng.IntN(6) {
		case 0:
			return "emq:{" + queues[rng.IntN(len(queues))] + "}:" + roles[rng.IntN(len(roles))]
		case 1:
			return key("a", roles[rng.IntN(len(roles))])
		case 2:
			return ints[rng.IntN(len(ints))]
		case 3:
			return []string{"J1", "J2", "J3", "J9", "NEW"}[rng.IntN(5)]
		case 4:
			return "{emq}:version"
		default:
			return junk()
		}
	}

	calls := 0
	for round := 0; round < 1000; round++ {
		for _, cmd := range commands {
			args := []string{cmd}
			for i, nargs := 0, rng.IntN(9); i < nargs; i++ {
				args = append(args, randArg(i))
			}
			reply := c.do(args...)
			if len(reply) == 0 {
				t.Fatalf("%q: empty reply", args)
			}
			calls++
		}
		// Now and then, a well-formed call of a random verb with random
		// values, so the domain code sees odd ids and integers too.
		s := shapes[rng.IntN(len(shapes))]
		id := []string{"J1", "J2", "J3", "NEW", junk()}[rng.IntN(5)]
		vals := s.vals(id)
		for _, j := range s.ints {
			vals[j-1] = ints[rng.IntN(len(ints))]
		}
		c.do(call(s.token, s.keys("a", id), vals)...)
		calls++
	}
	t.Logf("%d calls sent", calls)
	reply, err := node.RawDo(n.Addr, "PING")
	if err != nil || string(reply) != "+PONG\r\n" {
		t.Fatalf("PING after random input: %q, %v", reply, err)
	}
	c.do("SET", "{emq}:version", "echomq:6.0.0")
	x := q{t: t, c: c, name: "after"}
	x.expect(":1\r\n", x.enqueue("J1", "p")...)
	x.expect(array(bulk("J1"), bulk("p"), ":1\r\n"), x.claim("1000")...)
}
