package moduletest

import (
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestVersionReply checks EMQ.VERSION byte for byte.
func TestVersionReply(t *testing.T) { node.EachServer(t, testVersionReply) }

func testVersionReply(t *testing.T, srv node.Server) {
	_, c := startModule(t, node.Options{Server: srv.Path, NoBrand: true})
	verbs := make([]string, len(shapes))
	for i, s := range shapes {
		verbs[i] = bulk(s.token)
	}
	want := array(bulk("wire"), bulk("echomq:6.0.0"), bulk("module"), bulk("0.1.0"),
		bulk("verbs"), array(verbs...))
	if got := c.do("EMQ.VERSION"); got != want {
		t.Errorf("EMQ.VERSION = %q, want %q", got, want)
	}
	if got, want := c.do("EMQ.VERSION", "x"), errReply("ERR wrong number of arguments for 'emq.version' command"); got != want {
		t.Errorf("EMQ.VERSION x = %q, want %q", got, want)
	}
}

// TestInstall runs EMQ.INSTALL on each of the four values of the version
// key, and on malformed calls.
func TestInstall(t *testing.T) { node.EachServer(t, testInstall) }

func testInstall(t *testing.T, srv node.Server) {
	_, c := startModule(t, node.Options{Server: srv.Path, NoBrand: true})
	const vk = "{emq}:version"
	install := []string{"EMQ.INSTALL", "1", vk}

	// Absent: writes the brand, replies 1.
	if got := c.do(install...); got != ":1\r\n" {
		t.Fatalf("INSTALL on absent = %q, want :1", got)
	}
	if got := c.str("GET", vk); got != "echomq:6.0.0" {
		t.Fatalf("brand after INSTALL = %q", got)
	}

	// echomq:6.0.0: replies 0, writes nothing.
	d := dirty(c)
	if got := c.do(install...); got != ":0\r\n" {
		t.Errorf("INSTALL on own brand = %q, want :0", got)
	}
	if dirty(c) != d {
		t.Errorf("INSTALL on own brand wrote")
	}

	// Another string: the fence's text, nothing written.
	c.do("SET", vk, "echomq:4.0.0")
	d = dirty(c)
	if got, want := c.do(install...), errReply("EMQWIRE expected echomq:6.0.0 found echomq:4.0.0"); got != want {
		t.Errorf("INSTALL on foreign brand = %q, want %q", got, want)
	}
	if dirty(c) != d || c.str("GET", vk) != "echomq:4.0.0" {
		t.Errorf("INSTALL on foreign brand wrote")
	}

	// Not a string: the server's WRONGTYPE passes through.
	c.do("DEL", vk)
	c.do("HSET", vk, "a", "b")
	d = dirty(c)
	want := errReply("WRONGTYPE Operation against a key holding the wrong kind of value")
	if got := c.do(install...); got != want {
		t.Errorf("INSTALL on a hash = %q, want %q", got, want)
	}
	if dirty(c) != d || c.str("TYPE", vk) != "hash" {
		t.Errorf("INSTALL on a hash wrote")
	}
	c.do("DEL", vk)

	// Malformed calls: refused before any read, nothing written.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"EMQ.INSTALL"}, "ERR wrong number of arguments for 'emq.install' command"},
		{[]string{"EMQ.INSTALL", "x", vk}, "ERR value is not an integer or out of range"},
		{[]string{"EMQ.INSTALL", "-1", vk}, "ERR Number of keys can't be negative"},
		{[]string{"EMQ.INSTALL", "2", vk}, "ERR Number of keys can't be greater than number of args"},
		{[]string{"EMQ.INSTALL", "0", vk}, "EMQWIRE EMQ.INSTALL wants 1 keys, got 0"},
		{[]string{"EMQ.INSTALL", "2", vk, vk}, "EMQWIRE EMQ.INSTALL wants 1 keys, got 2"},
		{[]string{"EMQ.INSTALL", "1", vk, "echomq:6.0.0"}, "EMQWIRE EMQ.INSTALL wants 0 values, got 1"},
		{[]string{"EMQ.INSTALL", "1", "emq:version"}, "EMQWIRE EMQ.INSTALL key 1 must be {emq}:version"},
	} {
		d := dirty(c)
		if got := c.do(tc.args...); got != errReply(tc.want) {
			t.Errorf("%q = %q, want %q", tc.args, got, errReply(tc.want))
		}
		if dirty(c) != d || c.num("EXISTS", vk) != 0 {
			t.Errorf("%q wrote", tc.args)
		}
	}
}

// TestGetKeys checks that the key specs let the server find every verb's
// keys (COMMAND GETKEYS, and so ACL and cluster slots).
func TestGetKeys(t *testing.T) { node.EachServer(t, testGetKeys) }

func testGetKeys(t *testing.T, srv node.Server) {
	_, c := startModule(t, node.Options{Server: srv.Path})
	for _, s := range shapes {
		keys := s.keys("quotes", "JOB0KHTOWnGLuC")
		args := append([]string{"COMMAND", "GETKEYS"}, s.valid("quotes", "JOB0KHTOWnGLuC")...)
		elems := make([]string, len(keys))
		for i, k := range keys {
			elems[i] = bulk(k)
		}
		if got, want := c.do(args...), array(elems...); got != want {
			t.Errorf("GETKEYS EMQ.%s = %q, want %q", s.token, got, want)
		}
	}
	if got, want := c.do("COMMAND", "GETKEYS", "EMQ.INSTALL", "1", "{emq}:version"), array(bulk("{emq}:version")); got != want {
		t.Errorf("GETKEYS EMQ.INSTALL = %q, want %q", got, want)
	}
}
