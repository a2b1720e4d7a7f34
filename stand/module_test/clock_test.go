package moduletest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// hasCachedClock says whether the server's module API has a cached clock
// (RedisModule_CachedMicroseconds): every Valkey (forked from 7.2) and
// Redis 7.2 or later. It reads the server's own INFO, never the module.
func hasCachedClock(t *testing.T, c *conn) bool {
	t.Helper()
	if strings.Contains(c.str("INFO", "server"), "\r\nvalkey_version:") {
		return true
	}
	v := infoField(c, "server", "redis_version")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("redis_version %q", v)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("redis_version %q", v)
	}
	return major > 7 || major == 7 && minor >= 2
}

// clockRun is what one claim in a transaction showed of the clocks.
type clockRun struct {
	t1, t2 int64 // TIME before and after, inside the transaction
	now    int64 // the module's now: the lease deadline minus the lease
}

// claimInTx claims a job in one MULTI/EXEC between two TIME reads, with a
// 20 ms DEBUG SLEEP before the claim, on a fresh module node of srv built
// with defs.
func claimInTx(t *testing.T, srv node.Server, defs ...string) (clockRun, bool) {
	t.Helper()
	_, c := startModule(t, node.Options{Server: srv.Path, ModuleDefs: defs, Args: []string{"--enable-debug-command", "yes"}})
	const lease = 30000
	x := q{t: t, c: c, name: "clock"}
	x.expect(":1\r\n", x.enqueue("J1", "p")...)
	for _, cmd := range [][]string{{"MULTI"}, {"TIME"}, {"DEBUG", "SLEEP", "0.02"}, x.claim(strconv.Itoa(lease)), {"TIME"}} {
		if got := c.do(cmd...); !strings.HasPrefix(got, "+") {
			t.Fatalf("%q = %q", cmd, got)
		}
	}
	res, ok := c.val("EXEC").([]any)
	if !ok || len(res) != 4 {
		t.Fatalf("EXEC = %#v", res)
	}
	ms := func(v any) int64 {
		p := v.([]any)
		sec, _ := strconv.ParseInt(p[0].(string), 10, 64)
		usec, _ := strconv.ParseInt(p[1].(string), 10, 64)
		return sec*1000 + usec/1000
	}
	r := clockRun{t1: ms(res[0]), t2: ms(res[3]), now: zscores(c, x.k("active"))["J1"] - lease}
	return r, hasCachedClock(t, c)
}

// cachedTime checks that the transaction shared one time: both TIMEs and
// the module's now.
func (r clockRun) cachedTime() bool { return r.t1 == r.t2 && r.now == r.t1 }

// liveTime checks that the module's now was read after the sleep: 20 ms or
// more past the first TIME, and by the second.
func (r clockRun) liveTime() bool { return r.t2-r.t1 >= 20 && r.now >= r.t1+20 && r.now <= r.t2 }

// TestClockChoice proves which clock the module chose at load on each
// server, by what it writes: a claim runs in one MULTI/EXEC between two
// TIME reads, after a 20 ms DEBUG SLEEP. On a server with a cached clock,
// the whole transaction shares one time: both TIMEs are equal and the lease
// deadline is exactly that time plus the lease, sleep or not. On Redis 7.0
// (no cached clock: the module falls back to the live clock, and TIME in a
// transaction is live too) the deadline lies after the sleep. The
// EMQ_LIVE_CLOCK build, which ignores the cached clock, must show the live
// clock on every server: on a cached-clock server its TIMEs are still
// equal, its now is not.
func TestClockChoice(t *testing.T) { node.EachServer(t, testClockChoice) }

func testClockChoice(t *testing.T, srv node.Server) {
	r, cached := claimInTx(t, srv)
	t.Logf("cached clock expected %v; TIME %d and %d, the module's now %d", cached, r.t1, r.t2, r.now)
	switch {
	case cached && !r.cachedTime():
		t.Errorf("cached clock: TIMEs %d and %d and the module's now %d must be one time", r.t1, r.t2, r.now)
	case !cached && !r.liveTime():
		t.Errorf("live clock: the module's now %d must lie after the 20 ms sleep that follows TIME %d, and by TIME %d", r.now, r.t1, r.t2)
	}

	live, _ := claimInTx(t, srv, "EMQ_LIVE_CLOCK")
	t.Logf("EMQ_LIVE_CLOCK build: TIME %d and %d, the module's now %d", live.t1, live.t2, live.now)
	if live.now < live.t1+20 || cached && live.t1 != live.t2 || !cached && !live.liveTime() {
		t.Errorf("EMQ_LIVE_CLOCK build: the module's now %d must lie 20 ms or more past TIME %d (TIME after: %d)", live.now, live.t1, live.t2)
	}
}
