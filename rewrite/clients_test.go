package rewrite

import (
	"reflect"
	"testing"
)

// TestDecideClientListFilter: CLIENT LIST's options become the filter the
// session lists its server's clients by; CLIENT INFO selects the session.
func TestDecideClientListFilter(t *testing.T) {
	for _, c := range []struct {
		args []string
		want ClientFilter
	}{
		{[]string{"CLIENT", "LIST"}, ClientFilter{}},
		{[]string{"CLIENT", "INFO"}, ClientFilter{Info: true}},
		{[]string{"CLIENT", "LIST", "TYPE", "normal"}, ClientFilter{Type: "normal"}},
		{[]string{"CLIENT", "LIST", "TYPE", "SLAVE"}, ClientFilter{Type: "replica"}},
		{[]string{"CLIENT", "LIST", "TYPE", "replica"}, ClientFilter{Type: "replica"}},
		{[]string{"CLIENT", "LIST", "TYPE", "master"}, ClientFilter{Type: "master"}},
		{[]string{"CLIENT", "LIST", "id", "3", "1", "3", "-1", "0"}, ClientFilter{IDs: []int64{3, 1, 3, -1, 0}}},
	} {
		d := Decide(argv(c.args...), &State{ID: 3}, &Policy{})
		if d.Action != Local || d.Effect != ClientList || d.List == nil || !reflect.DeepEqual(*d.List, c.want) {
			t.Errorf("%q: %v %v %+v, want local client_list %+v", c.args, d.Action, d.Effect, d.List, c.want)
		}
	}
	// The session's own line twice for its id named twice.
	d := Decide(argv("CLIENT", "LIST", "ID", "3", "3"), &State{ID: 3}, &Policy{})
	line := string(clientInfo(&State{ID: 3}, &Policy{}, "client|list"))
	if want := string(bulkReply([]byte(line + line))); string(d.Reply) != want {
		t.Errorf("reply %q, want %q", d.Reply, want)
	}
}

// TestAppendClientInfo: every field in the server's order, the defaults
// spelled as the server spells them.
func TestAppendClientInfo(t *testing.T) {
	c := ClientInfo{ID: 9, Addr: "127.0.0.1:1", LocalAddr: "127.0.0.1:2", FD: 12, Name: []byte("w"), Age: 3, Idle: 1,
		Flags: "Px", DB: 2, Sub: 1, PSub: 2, SSub: 3, Multi: 4, QBuf: 5, QBufFree: 6, Cmd: "get", User: "u", Proto: 3}
	want := "id=9 addr=127.0.0.1:1 laddr=127.0.0.1:2 fd=12 name=w age=3 idle=1 flags=Px db=2 sub=1 psub=2 ssub=3 " +
		"multi=4 qbuf=5 qbuf-free=6 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r " +
		"cmd=get user=u redir=-1 resp=3\n"
	if got := string(AppendClientInfo(nil, &c)); got != want {
		t.Errorf("\n got  %q\n want %q", got, want)
	}
	got := string(AppendClientInfo(nil, &ClientInfo{Multi: -1}))
	want = "id=0 addr= laddr= fd=0 name= age=0 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 " +
		"argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=NULL user=default redir=-1 resp=2\n"
	if got != want {
		t.Errorf("\n got  %q\n want %q", got, want)
	}
}
