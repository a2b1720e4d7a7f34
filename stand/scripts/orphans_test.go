package scripts

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestOrphansOfAddressedIDs: an id found in its set with no row is dropped
// from that set, no row is written, and the call replies as if the id were
// not there.
func TestOrphansOfAddressedIDs(t *testing.T) { node.EachServer(t, testOrphansOfAddressedIDs) }

func testOrphansOfAddressedIDs(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("orphan")
	cases := []struct {
		script string
		set    string
		values []string
		reply  int64
	}{
		{"extend", q.active(), []string{"O", "1000"}, 0},
		{"complete", q.active(), []string{"O"}, 0},
		{"fail", q.active(), []string{"O", "e", "3", "0"}, -1},
		{"retry", q.dead(), []string{"O"}, 0},
		{"cancel", q.pending(), []string{"O"}, 0},
		{"cancel", q.delayed(), []string{"O"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.script, func(t *testing.T) {
			w := w.on(t)
			w.do("ZADD", tc.set, "1", "O")
			w.expect(w.call(tc.script, q.keys(tc.script, "O"), tc.values...), tc.reply, "reply")
			if left := w.do("KEYS", "emq:{orphan}*").([]any); len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}
