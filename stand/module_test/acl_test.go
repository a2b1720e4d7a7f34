package moduletest

import (
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// noperm is the module's own refusal text, for the keys it checks itself.
const noperm = "NOPERM this user has no permissions to access one of the keys used as arguments"

// TestACL checks that a user without access to the keys a verb touches
// gets a NOPERM error and that nothing is written: keys named in the call
// (checked by the server through the key specs, so the reply is the
// server's own text, which differs between servers: it is read from the
// same server with a plain command), the brand (read by the fence as the
// caller), and derived row keys (read as the caller before the first
// write; the module's text).
func TestACL(t *testing.T) { node.EachServer(t, testACL) }

func testACL(t *testing.T, srv node.Server) {
	n, admin := startModule(t, node.Options{Server: srv.Path, ACL: []string{
		"alice on >pw ~emq:{a}:* %R~{emq}:version +@all",
		"carol on >pw ~emq:{a}:* +@all",
		"bob on >pw ~emq:{a}:pending ~emq:{a}:active ~emq:{a}:delayed ~emq:{a}:paused %R~{emq}:version +@all",
		"dave on >pw %R~emq:{a}:* %R~{emq}:version +@all",
		"erin on >pw +@all",
	}})
	// The server's refusal of a key: erin may run anything on no key.
	serverNoperm := dial(t, n.Addr, "erin", "pw").do("GET", key("a", "pending"))
	if !strings.HasPrefix(serverNoperm, "-NOPERM ") {
		t.Fatalf("GET without key access = %q, want a NOPERM error", serverNoperm)
	}
	seedQueue(admin, "a")
	seedQueue(admin, "b")
	admin.do("ZADD", key("a", "pending"), "0", "J5")
	admin.do("HSET", row("a", "J5"), "state", "pending", "attempts", "0", "payload", "p")
	admin.do("ZADD", key("a", "delayed"), "2", "J6")
	admin.do("HSET", row("a", "J6"), "state", "delayed", "attempts", "0", "payload", "p")

	enqueue := func(q string) []string { return shapes[0].valid(q, "NEW") }
	claim := shapes[1].valid("a", "")
	promote := shapes[7].valid("a", "")
	for _, tc := range []struct {
		user string
		args []string
		want string
	}{
		{"alice", enqueue("b"), serverNoperm},     // keys of another queue
		{"dave", enqueue("a"), serverNoperm},      // read-only on the queue
		{"carol", enqueue("a"), errReply(noperm)}, // cannot read the brand
		{"bob", claim, errReply(noperm)},          // cannot touch the rows CLAIM derives
		{"bob", promote, errReply(noperm)},        // nor the rows PROMOTE derives
		{"alice", enqueue("a"), ":1\r\n"},         // the control: allowed, and it writes
		{"alice", claim, array(bulk("J2"), bulk("p-J2"), ":1\r\n")},
	} {
		u := dial(t, n.Addr, tc.user, "pw")
		before, d := snapshot(admin), dirty(admin)
		got := u.do(tc.args...)
		if got != tc.want {
			t.Errorf("%s %q = %q, want %q", tc.user, tc.args, got, tc.want)
		}
		if tc.want[0] == '-' && (dirty(admin) != d || !equalMap(before, snapshot(admin))) {
			t.Errorf("%s %q: refused, but the keyspace changed", tc.user, tc.args)
		}
		if tc.want[0] != '-' && dirty(admin) == d {
			t.Errorf("%s %q: allowed, but nothing was written", tc.user, tc.args)
		}
	}
}
