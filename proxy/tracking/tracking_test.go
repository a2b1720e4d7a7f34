package tracking

import (
	"bytes"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// args splits a command line into its arguments.
func args(line string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(line) {
		out = append(out, []byte(f))
	}
	return out
}

func TestOnOff(t *testing.T) {
	for _, c := range []struct {
		line   string
		on, ok bool
	}{
		{"CLIENT TRACKING ON", true, true},
		{"client tracking on redirect 5", true, true},
		{"CLIENT TRACKING OFF", false, true},
		{"CLIENT TRACKING oFf BCAST", false, true},
		{"CLIENT TRACKING MAYBE", false, false},
		{"CLIENT TRACKING", false, false},
		{"CLIENT TRACKINGINFO", false, false},
		{"CLIENT CACHING YES", false, false},
		{"GET k", false, false},
	} {
		on, ok := OnOff(args(c.line))
		if on != c.on || ok != c.ok {
			t.Errorf("OnOff(%q) = %v, %v; want %v, %v", c.line, on, ok, c.on, c.ok)
		}
	}
}

func TestIsCaching(t *testing.T) {
	for line, want := range map[string]bool{
		"CLIENT CACHING YES":  true,
		"client caching no":   true,
		"CLIENT CACHING":      true, // the server's arity error
		"CLIENT TRACKING ON":  false,
		"CLIENT":              false,
		"CACHING YES":         false,
		"CLIENT GETREDIR":     false,
		"CLIENT TRACKINGINFO": false,
	} {
		if got := IsCaching(args(line)); got != want {
			t.Errorf("IsCaching(%q) = %v, want %v", line, got, want)
		}
	}
}

func TestRedirect(t *testing.T) {
	for _, c := range []struct {
		line   string
		at     int
		target uint64
	}{
		{"CLIENT TRACKING ON", 0, 0},
		{"CLIENT TRACKING ON REDIRECT 7", 4, 7},
		{"CLIENT TRACKING ON redirect 7", 4, 7},
		{"CLIENT TRACKING ON BCAST REDIRECT 12 PREFIX a", 5, 12},
		{"CLIENT TRACKING ON PREFIX a REDIRECT 3", 6, 3},
		// PREFIX takes a value, even one spelt REDIRECT.
		{"CLIENT TRACKING ON PREFIX REDIRECT 9", 0, 0},
		{"CLIENT TRACKING ON PREFIX REDIRECT REDIRECT 9", 6, 9},
		// The first REDIRECT counts.
		{"CLIENT TRACKING ON REDIRECT 4 REDIRECT 5", 4, 4},
		// Not a positive integer: the server refuses it as it is.
		{"CLIENT TRACKING ON REDIRECT 0", 0, 0},
		{"CLIENT TRACKING ON REDIRECT -2", 0, 0},
		{"CLIENT TRACKING ON REDIRECT x", 0, 0},
		{"CLIENT TRACKING ON REDIRECT 4 REDIRECT x", 4, 4},
		// No value.
		{"CLIENT TRACKING ON REDIRECT", 0, 0},
		// Before the options: ON or OFF's place.
		{"CLIENT TRACKING REDIRECT 5", 0, 0},
		{"CLIENT TRACKING OFF REDIRECT 5", 4, 5},
	} {
		at, target := redirect(args(c.line))
		if at != c.at || target != c.target {
			t.Errorf("redirect(%q) = %d, %d; want %d, %d", c.line, at, target, c.at, c.target)
		}
	}
}

func TestBcast(t *testing.T) {
	for line, want := range map[string]bool{
		"CLIENT TRACKING ON":                          false,
		"CLIENT TRACKING ON BCAST":                    true,
		"CLIENT TRACKING ON bcast PREFIX a":           true,
		"CLIENT TRACKING ON PREFIX a BCAST":           true,
		"CLIENT TRACKING ON PREFIX BCAST":             false, // BCAST is PREFIX's value
		"CLIENT TRACKING ON REDIRECT BCAST":           false, // and here REDIRECT's
		"CLIENT TRACKING ON REDIRECT 5 BCAST":         true,
		"CLIENT TRACKING ON OPTIN":                    false,
		"CLIENT TRACKING BCAST":                       false, // ON or OFF's place
		"CLIENT TRACKING ON PREFIX a PREFIX b NOLOOP": false,
	} {
		if got := bcast(args(line)); got != want {
			t.Errorf("bcast(%q) = %v, want %v", line, got, want)
		}
	}
}

func TestEncodeArgs(t *testing.T) {
	got := encodeArgs(args("CLIENT TRACKING OFF"))
	want := "*3\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$3\r\nOFF\r\n"
	if string(got) != want {
		t.Errorf("encodeArgs = %q, want %q", got, want)
	}
}

func TestSpliceRedirect(t *testing.T) {
	info := func(redirect string) string {
		return "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:" + redirect +
			"\r\n$8\r\nprefixes\r\n*1\r\n$1\r\na\r\n"
	}
	for _, c := range []struct {
		name   string
		reply  string
		target uint64
		want   string
	}{
		{"the relay's id", info("1234"), 7, info("7")},
		{"broken", info("-1"), 42, info("42")},
		{"a long id", info("9"), 9223372036854775807, info("9223372036854775807")},
		{"no redirect field", "*2\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n", 7, "*2\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n"},
		{"an error", "-ERR unknown subcommand\r\n", 7, "-ERR unknown subcommand\r\n"},
		{"cut short", "*6\r\n$5\r\nflags\r\n*0\r\n$8\r\nredirect\r\n:12", 7, "*6\r\n$5\r\nflags\r\n*0\r\n$8\r\nredirect\r\n:12"},
	} {
		r := []byte(c.reply)
		got := spliceRedirect(r, c.target)
		if string(got) != c.want {
			t.Errorf("%s: spliceRedirect = %q, want %q", c.name, got, c.want)
		}
		if string(r) != c.reply {
			t.Errorf("%s: the server's reply changed: %q", c.name, r)
		}
	}
}

// ended returns an Env whose sessions listed are those of listed, and in
// which the sessions of gone have ended.
func ended(listed []uint64, gone ...uint64) Env {
	r := new(pubsub.Redirects)
	is := func(id uint64) bool {
		for _, l := range listed {
			if l == id {
				return true
			}
		}
		return false
	}
	for _, g := range gone {
		r.End(g)
		if !is(g) {
			r.Forget(g) // as the server does once it unlists a session
		}
	}
	return Env{Redir: r, Listed: is}
}

// TestCommandNoRelay covers the CLIENT TRACKING sent when the session
// REDIRECT names has no relay to open: none is listed, or it ended.
func TestCommandNoRelay(t *testing.T) {
	for _, env := range []Env{ended(nil), ended([]uint64{5}, 5)} {
		tr := New(env)
		a := args("CLIENT TRACKING ON REDIRECT 5 BCAST")
		at, target := redirect(a)
		if tr.alive(target) {
			t.Fatal("alive: want false")
		}
		got := tr.command(nil, a, at, target, true)
		if want := encodeArgs(args("CLIENT TRACKING ON REDIRECT " + noSuchClient + " BCAST")); !bytes.Equal(got, want) {
			t.Errorf("strict: %q, want %q", got, want)
		}
		got = tr.command(nil, a, at, target, false)
		if want := encodeArgs(args("CLIENT TRACKING ON BCAST")); !bytes.Equal(got, want) {
			t.Errorf("not strict: %q, want %q", got, want)
		}
		if string(a[4]) != "5" {
			t.Errorf("the client's args changed: %q", a)
		}
		if len(tr.redirs) != 0 {
			t.Errorf("relays: %d, want none", len(tr.redirs))
		}
	}
	tr := New(ended(nil))
	a := args("CLIENT TRACKING ON PREFIX a")
	if got, want := tr.command(nil, a, 0, 0, true), encodeArgs(a); !bytes.Equal(got, want) {
		t.Errorf("no REDIRECT: %q, want %q", got, want)
	}
	if tr.alive(0) {
		t.Error("alive(0): want false")
	}
}

func TestNilTracker(t *testing.T) {
	var tr *Tracker
	if tr.On() || tr.Caching() {
		t.Error("a nil tracker tracks")
	}
	if got := string(tr.GetRedir()); got != ":-1\r\n" {
		t.Errorf("GetRedir = %q", got)
	}
	if !tr.Track(nil, nil) {
		t.Error("Track: want true (nothing to turn on)")
	}
	if ok, broke := tr.Own(nil, nil); !ok || broke {
		t.Errorf("Own = %v, %v; want true, false", ok, broke)
	}
	if tr.KeepPin(nil, nil) || tr.TakePin(nil) != nil {
		t.Error("a nil tracker keeps pins")
	}
}

func TestGetRedir(t *testing.T) {
	tr := New(Env{})
	if got := string(tr.GetRedir()); got != ":-1\r\n" {
		t.Errorf("off: GetRedir = %q", got)
	}
	tr.on = true
	if got := string(tr.GetRedir()); got != ":0\r\n" {
		t.Errorf("no REDIRECT: GetRedir = %q", got)
	}
	tr.target = 17
	if got := string(tr.GetRedir()); got != ":17\r\n" {
		t.Errorf("REDIRECT 17: GetRedir = %q", got)
	}
}

func TestPins(t *testing.T) {
	u1, u2 := new(upstream.Upstream), new(upstream.Upstream)
	p1, p2, p3 := new(pipe.Pipe), new(pipe.Pipe), new(pipe.Pipe)
	tr := New(Env{})
	if tr.KeepPin(u1, p1) {
		t.Fatal("kept a pin while not tracking")
	}
	tr.on = true
	if tr.KeepPin(nil, p1) {
		t.Error("kept a pin of no upstream")
	}
	if !tr.KeepPin(u1, p1) {
		t.Fatal("did not keep the first pin to u1")
	}
	if tr.KeepPin(u1, p2) {
		t.Error("kept a second pin to u1")
	}
	if !tr.KeepPin(u2, p3) {
		t.Error("did not keep the pin to u2")
	}
	if len(tr.pins) != 2 || tr.pins[0] != (Conn{Up: u1, P: p1}) || tr.pins[1] != (Conn{Up: u2, P: p3}) {
		t.Errorf("pins = %v", tr.pins)
	}
	if p := tr.TakePin(new(upstream.Upstream)); p != nil || len(tr.pins) != 2 {
		t.Errorf("TakePin of an upstream with no pin: %v, %d pins", p, len(tr.pins))
	}
}

func TestOwn(t *testing.T) {
	u := new(upstream.Upstream)
	tr := New(Env{})
	if ok, broke := tr.Own(u, nil); !ok || broke {
		t.Errorf("not tracking: Own = %v, %v; want true, false", ok, broke)
	}
	tr.on = true
	tr.ups = []*upstream.Upstream{u}
	if ok, broke := tr.Own(u, nil); ok || !broke {
		t.Errorf("replacing a tracked connection: Own = %v, %v; want false, true", ok, broke)
	}
}

func TestCachingAndDrop(t *testing.T) {
	env := ended(nil)
	tr := New(env)
	if tr.Caching() {
		t.Fatal("a new tracker keeps a CLIENT CACHING")
	}
	raw := []byte("*3\r\n$6\r\nCLIENT\r\n$7\r\nCACHING\r\n$3\r\nyes\r\n")
	tr.KeepCaching(raw, 3, true)
	raw[0] = '!'
	if !tr.Caching() {
		t.Fatal("not kept")
	}
	kc := tr.TakeCaching()
	if string(kc.Raw) != "*3\r\n$6\r\nCLIENT\r\n$7\r\nCACHING\r\n$3\r\nyes\r\n" || kc.Audit != 3 || !kc.Mute {
		t.Errorf("TakeCaching = %q, %d, %v", kc.Raw, kc.Audit, kc.Mute)
	}
	if tr.Caching() {
		t.Error("still kept after TakeCaching")
	}

	tr.on, tr.bcast, tr.target, tr.redirAt = true, true, 9, 4
	tr.args = args("CLIENT TRACKING ON REDIRECT 9 BCAST")
	tr.ups = []*upstream.Upstream{new(upstream.Upstream)}
	tr.KeepCaching(raw, 1, false)
	tr.Prune() // no relays: nothing to close
	tr.Drop()
	if tr.On() || tr.Bcast() || tr.target != 0 || tr.redirAt != 0 || len(tr.args) != 0 || len(tr.ups) != 0 || tr.Caching() {
		t.Errorf("after Drop: %+v", tr)
	}
	if tr.env.Redir != env.Redir || tr.env.Listed == nil {
		t.Error("Drop lost the tracker's Env")
	}
}
