package clients

import (
	"bytes"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/rewrite"
)

// fake is a Client with no session behind it: a View over one end of a
// net.Pipe, and a count of its Closes.
type fake struct {
	id     uint64
	v      View
	closed int
}

func (f *fake) ID() uint64  { return f.id }
func (f *fake) View() *View { return &f.v }
func (f *fake) Close()      { f.closed++ }

// newFake returns a fake client id, accepted at, having published fields
// with the command args.
func newFake(t *testing.T, id uint64, at time.Time, fields Fields, args ...string) *fake {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	f := &fake{id: id}
	f.v.Init(fmt.Sprintf("10.0.0.1:%d000", id), a, at)
	for _, s := range args {
		f.v.LastArgs = append(f.v.LastArgs, []byte(s))
	}
	f.v.Publish(at, fields)
	return f
}

func registry(cs ...*fake) *Registry[*fake] {
	r := &Registry[*fake]{}
	for _, c := range cs {
		r.Add(c)
	}
	return r
}

func TestRegistry(t *testing.T) {
	var r Registry[*fake] // the zero value is empty
	if r.Listed(1) {
		t.Fatal("empty registry lists 1")
	}
	a, b := &fake{id: 1}, &fake{id: 2}
	r.Add(a)
	r.Add(b)
	r.Add(a) // listed once
	if c, ok := r.byID(2); !ok || c != b {
		t.Fatalf("byID(2) = %v, %v", c, ok)
	}
	if c, ok := r.byID(3); ok || c != nil {
		t.Fatalf("byID(3) = %v, %v", c, ok)
	}
	var ids []uint64
	r.Each(func(c *fake) { ids = append(ids, c.ID()) })
	slices.Sort(ids)
	if !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("Each: %v", ids)
	}
	r.Remove(a)
	r.Remove(a)
	if r.Listed(1) || !r.Listed(2) {
		t.Fatalf("after Remove(1): Listed(1) = %v, Listed(2) = %v", r.Listed(1), r.Listed(2))
	}
}

func table() *cmdtable.Store {
	ks := &cmdtable.Store{}
	ks.Merge(cmdtable.Table{
		"get": {Name: "get"},
		"client": {Name: "client", Subs: map[string]*cmdtable.Entry{
			"list":    {Name: "client|list"},
			"setinfo": {Name: "client|setinfo"},
		}},
	})
	return ks
}

func TestFullName(t *testing.T) {
	name := func(ks *cmdtable.Store, args ...string) string {
		var cmd [2]viewName
		cmd[0].set([]byte(args[0]), true)
		if len(args) > 1 {
			cmd[1].set([]byte(args[1]), true)
		} else {
			cmd[1].set(nil, false)
		}
		return fullName(ks, &cmd)
	}
	var none cmdtable.Store
	ks := table()
	long := strings.Repeat("x", 33)
	for _, c := range []struct {
		ks   *cmdtable.Store
		args []string
		want string
	}{
		{&none, []string{"GET"}, "get"}, // before the table: as sent, lower case
		{&none, []string{"Client", "LIST"}, "client"},
		{&none, []string{long}, ""},
		{ks, []string{"GET", "k"}, "get"}, // no subcommands
		{ks, []string{"CLIENT", "List"}, "client|list"},
		{ks, []string{"client"}, "client"},
		{ks, []string{"client", "nosuch"}, ""},
		{ks, []string{"client", long}, ""},
		{ks, []string{"nosuch"}, ""},
		{ks, []string{long}, ""},
	} {
		if got := name(c.ks, c.args...); got != c.want {
			t.Errorf("fullName(%q) = %q, want %q", c.args, got, c.want)
		}
	}
	var cmd [2]viewName
	cmd[0].n, cmd[1].n = -1, -1 // no command yet
	if got := fullName(ks, &cmd); got != "" {
		t.Errorf("fullName(none) = %q", got)
	}
}

func TestConnFD(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if fd := connFD(a); fd != -1 {
		t.Errorf("connFD(pipe) = %d, want -1", fd)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if fd := connFD(c); fd < 0 {
		t.Errorf("connFD(tcp) = %d", fd)
	}
}

// lines returns the lines of a RESP2 CLIENT LIST reply.
func lines(t *testing.T, reply []byte) []string {
	t.Helper()
	i := bytes.Index(reply, []byte("\r\n"))
	if reply[0] != '$' || i < 0 {
		t.Fatalf("reply %q", reply)
	}
	body := strings.TrimSuffix(string(reply[i+2:]), "\r\n")
	if body == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(body, "\n"), "\n")
}

var since = regexp.MustCompile(` age=([0-9]+) idle=([0-9]+)`)

func TestList(t *testing.T) {
	ks := table()
	at := time.Now().Add(-3500 * time.Millisecond)
	one := newFake(t, 1, at, Fields{Name: []byte("a"), Multi: -1, QBuf: 5, QBufFree: 7}, "GET", "k")
	two := newFake(t, 2, at, Fields{User: "u", Proto: 3, Multi: 2, Lib: [2][]byte{[]byte("lib"), []byte("1.0")}}, "client", "list")
	three := newFake(t, 3, at, Fields{Multi: -1})
	three.v.Blocked.Store(true)
	r := registry(three, one, two)

	// Age and idle are whole seconds since at, 3 unless the test stalls;
	// the caller's own idle is 0.
	got := lines(t, r.List(two, &rewrite.ClientFilter{}, ks, 4, 2))
	for i, l := range got {
		m := since.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %d: %q", i+1, l)
		}
		age, _ := strconv.Atoi(m[1])
		idle, _ := strconv.Atoi(m[2])
		if self := strings.HasPrefix(l, "id=2 "); age < 3 || self && idle != 0 || !self && idle < 3 {
			t.Errorf("line %d: age %d, idle %d", i+1, age, idle)
		}
		got[i] = since.ReplaceAllString(l, " age=A idle=I")
	}
	want := []string{
		"id=1 addr=10.0.0.1:1000 laddr=pipe fd=-1 name=a age=A idle=I flags=N db=4 sub=0 psub=0 ssub=0 multi=-1 qbuf=5 qbuf-free=7 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=get user=default redir=-1 resp=2 lib-name= lib-ver=",
		"id=2 addr=10.0.0.1:2000 laddr=pipe fd=-1 name= age=A idle=I flags=x db=4 sub=0 psub=0 ssub=0 multi=2 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=client|list user=u redir=-1 resp=3 lib-name=lib lib-ver=1.0",
		"id=3 addr=10.0.0.1:3000 laddr=pipe fd=-1 name= age=A idle=I flags=b db=4 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=NULL user=default redir=-1 resp=2 lib-name= lib-ver=",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CLIENT LIST:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The caller's own line names the command it is answering.
	info := lines(t, r.List(one, &rewrite.ClientFilter{Info: true}, ks, 4, 2))
	if len(info) != 1 || !strings.HasPrefix(info[0], "id=1 ") || !strings.Contains(info[0], " idle=0 ") ||
		!strings.Contains(info[0], " cmd=client|info ") {
		t.Fatalf("CLIENT INFO: %q", info)
	}

	ids := func(f *rewrite.ClientFilter) (ids []string) {
		for _, l := range lines(t, r.List(one, f, ks, 0, 2)) {
			ids = append(ids, strings.Fields(l)[0])
		}
		return ids
	}
	for _, c := range []struct {
		f    rewrite.ClientFilter
		want []string
	}{
		{rewrite.ClientFilter{IDs: []int64{3, 9, 1, 3, 0, -1}}, []string{"id=3", "id=1", "id=3"}},
		{rewrite.ClientFilter{IDs: []int64{}}, nil},
		{rewrite.ClientFilter{Type: "normal"}, []string{"id=1", "id=2", "id=3"}},
		{rewrite.ClientFilter{Type: "pubsub"}, nil},
		{rewrite.ClientFilter{Type: "master"}, nil},
		{rewrite.ClientFilter{Type: "replica"}, nil},
	} {
		if got := ids(&c.f); !slices.Equal(got, c.want) {
			t.Errorf("CLIENT LIST %+v: %v, want %v", c.f, got, c.want)
		}
	}

	// RESP3: a verbatim string.
	if rep := r.List(one, &rewrite.ClientFilter{Info: true}, ks, 0, 3); !bytes.HasPrefix(rep, []byte("=")) {
		t.Errorf("RESP3 CLIENT INFO: %q", rep)
	}
}

func TestPublish(t *testing.T) {
	at := time.Now()
	f := newFake(t, 1, at, Fields{Multi: -1}, "SET", "k", "v")
	if f.v.LastArgs != nil {
		t.Fatal("Publish kept LastArgs")
	}
	// A batch with no command keeps the last one's name; the zero time
	// keeps the last batch's.
	f.v.Publish(time.Time{}, Fields{Multi: -1})
	c, _ := f.v.info(1, at.Add(2*time.Second), 0, &cmdtable.Store{})
	if c.Cmd != "set" || c.Idle != 2 || c.Age != 2 {
		t.Fatalf("after an empty publish: cmd %q idle %d age %d", c.Cmd, c.Idle, c.Age)
	}
}

func TestKill(t *testing.T) {
	one, two, three := &fake{id: 1}, &fake{id: 2}, &fake{id: 3}
	r := registry(one, two, three)
	for _, c := range []struct {
		t         rewrite.ClientTarget
		reply     string
		closeSelf bool
	}{
		{rewrite.ClientTarget{ID: 9, SkipMe: true}, ":0\r\n", false},
		{rewrite.ClientTarget{ID: 1, SkipMe: true}, ":0\r\n", false}, // itself, skipped
		{rewrite.ClientTarget{ID: 1}, ":1\r\n", true},
		{rewrite.ClientTarget{ID: 2, SkipMe: true}, ":1\r\n", false},
	} {
		reply, closeSelf := r.Kill(one, &c.t)
		if string(reply) != c.reply || closeSelf != c.closeSelf {
			t.Errorf("CLIENT KILL %+v: %q, %v; want %q, %v", c.t, reply, closeSelf, c.reply, c.closeSelf)
		}
	}
	if one.closed != 0 || two.closed != 1 || three.closed != 0 || r.Listed(2) || !r.Listed(1) {
		t.Fatalf("after KILL ID 2: closed %d %d %d, listed 2: %v", one.closed, two.closed, three.closed, r.Listed(2))
	}
	// No ID: every session; the caller's own under SKIPME no.
	four := &fake{id: 4}
	r.Add(four)
	reply, closeSelf := r.Kill(one, &rewrite.ClientTarget{})
	if string(reply) != ":3\r\n" || !closeSelf || three.closed != 1 || four.closed != 1 || one.closed != 0 {
		t.Fatalf("CLIENT KILL SKIPME no: %q, %v", reply, closeSelf)
	}
	if !r.Listed(1) || r.Listed(3) || r.Listed(4) {
		t.Fatal("CLIENT KILL unlisted the wrong sessions")
	}
}

func TestUnblockNotBlocked(t *testing.T) {
	one, two := &fake{id: 1}, &fake{id: 2}
	three := &fake{id: 3}
	three.v.Blocked.Store(true) // blocked, but its connection's id is unknown
	four := &fake{id: 4}
	four.v.Blocked.Store(true)
	four.v.BlockOn.Store(&BlockConn{})
	one.v.Blocked.Store(true)
	r := registry(one, two, three, four)
	for _, id := range []int64{0, -1, 9, 1, 2, 3, 4} {
		if got := r.Unblock(one, &rewrite.ClientTarget{ID: id}, nil); string(got) != ":0\r\n" {
			t.Errorf("CLIENT UNBLOCK %d: %q", id, got)
		}
	}
}
