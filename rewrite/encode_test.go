package rewrite

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
)

func TestAppendRewritten(t *testing.T) {
	m := testMap(t)
	args := argv("EVALSHA", shaEnqueue, "2", "emq:{q}:job:1", "emq:{q}:pending", "1", "pay\r\nload")
	d := Decide(args, &State{}, &Policy{Map: m})
	got := string(AppendRewritten([]byte("prefix"), args, d))
	want := "prefix*6\r\n$11\r\nEMQ.ENQUEUE\r\n$1\r\n2\r\n$13\r\nemq:{q}:job:1\r\n$15\r\nemq:{q}:pending\r\n" +
		"$1\r\n1\r\n$9\r\npay\r\nload\r\n"
	if got != want {
		t.Errorf("AppendRewritten = %q, want %q", got, want)
	}
	ro := Decide(argv("EVALSHA", shaUnknown, "0"), &State{}, &Policy{Map: m, Unknown: ReadonlyUnknown})
	if got := string(AppendRewritten(nil, argv("EVALSHA", shaUnknown, "0"), ro)); got !=
		"*3\r\n$10\r\nEVALSHA_RO\r\n$40\r\n"+shaUnknown+"\r\n$1\r\n0\r\n" {
		t.Errorf("read-only rewrite = %q", got)
	}
}

func TestPatchScriptExists(t *testing.T) {
	m := testMap(t)
	args := argv("SCRIPT", "EXISTS", shaUnknown, shaEnqueue, shaStats)
	if d := Decide(args, &State{}, &Policy{Map: m}); d.Effect != ScriptExists {
		t.Fatalf("effect %v, want script_exists", d.Effect)
	}
	for _, c := range []struct {
		name, upstream, want string
		err                  error
	}{
		{name: "verb answered 1", upstream: "*3\r\n:0\r\n:0\r\n:1\r\n", want: "*3\r\n:0\r\n:1\r\n:1\r\n"},
		{name: "others kept", upstream: "*3\r\n:1\r\n:0\r\n:0\r\n", want: "*3\r\n:1\r\n:1\r\n:0\r\n"},
		{name: "error passes", upstream: "-NOPERM no\r\n", want: "-NOPERM no\r\n"},
		{name: "wrong count", upstream: "*2\r\n:0\r\n:0\r\n", err: ErrReply},
		{name: "not integers", upstream: "*3\r\n$1\r\na\r\n:0\r\n:0\r\n", err: ErrReply},
		{name: "trailing bytes", upstream: "*3\r\n:0\r\n:0\r\n:0\r\n:0\r\n", err: ErrReply},
		{name: "truncated", upstream: "*3\r\n:0\r\n", err: ErrReply},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := PatchScriptExists([]byte(c.upstream), args, m)
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if err == nil && string(got) != c.want {
				t.Errorf("patched = %q, want %q", got, c.want)
			}
		})
	}
}

// TestStandMap runs every script of the stand's pinned map through Decide
// with its pinned shape and with one key too few.
func TestStandMap(t *testing.T) {
	path := filepath.Join("..", "stand", "map.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no stand map at %s: %v", path, err)
	}
	m, err := shamap.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p := &Policy{Map: m}
	for _, s := range m.Scripts {
		args := []string{"EVALSHA", s.SHA, strconv.Itoa(s.Keys)}
		for i := range s.Keys {
			args = append(args, "emq:{q}:k"+strconv.Itoa(i))
		}
		for i := range s.Values {
			args = append(args, "v"+strconv.Itoa(i))
		}
		d := Decide(argv(args...), &State{}, p)
		switch {
		case s.Read && (d.Action != Rewrite || d.Head != "EVALSHA_RO" || d.Replace != 1):
			t.Errorf("%s (read): %v %q %d, want a rewrite to EVALSHA_RO", s.Name, d.Action, d.Head, d.Replace)
		case !s.Read && (d.Action != Rewrite || d.Head != "EMQ."+s.Verb || d.Replace != 2):
			t.Errorf("%s: %v %q %d, want a rewrite to EMQ.%s", s.Name, d.Action, d.Head, d.Replace, s.Verb)
		}
		if s.Read || s.Keys == 0 {
			continue
		}
		args[2] = strconv.Itoa(s.Keys - 1)
		d = Decide(argv(args...), &State{}, p)
		want := "-EMQWIRE EMQ." + s.Verb + " wants " + strconv.Itoa(s.Keys) + " keys, got " + strconv.Itoa(s.Keys-1) + "\r\n"
		if d.Action != Refuse || string(d.Reply) != want {
			t.Errorf("%s with a key too few: %v %q, want %q", s.Name, d.Action, d.Reply, want)
		}
	}
}
