package rewrite

import "testing"

// TestStateApply: what each decision changes of the protocol state, and
// what RESET keeps.
func TestStateApply(t *testing.T) {
	st := State{ID: 7, Addr: "a:1", LocalAddr: "l:2", Fenced: true}
	st.Apply(&Decision{Effect: Auth, User: "alice"})
	if !st.Authenticated || st.User != "alice" {
		t.Fatalf("after AUTH: %+v", st)
	}
	st.Apply(&Decision{Effect: SetName, SetsName: true, Arg: []byte("worker")})
	st.Apply(&Decision{Effect: SetLibName, Arg: []byte("lib")})
	st.Apply(&Decision{Effect: SetLibVer, Arg: []byte("1.0")})
	if string(st.Name) != "worker" || string(st.LibName) != "lib" || string(st.LibVer) != "1.0" {
		t.Fatalf("after SETNAME and SETINFO: %+v", st)
	}
	st.Apply(&Decision{Effect: SetLibVer, Arg: nil})
	if st.LibVer != nil {
		t.Fatalf("SETINFO LIB-VER \"\" kept %q", st.LibVer)
	}
	st.Apply(&Decision{Effect: Hello, Proto: 3, User: "bob", SetsName: true})
	if st.Proto != 3 || st.User != "bob" || st.Name != nil {
		t.Fatalf("after HELLO 3 AUTH bob SETNAME \"\": %+v", st)
	}
	st.Apply(&Decision{Effect: Hello, Proto: 2})
	if st.Proto != 2 {
		t.Fatalf("after HELLO 2: proto %d", st.Proto)
	}
	st.Apply(&Decision{Effect: Multi, Action: Pass})
	if st.InMulti {
		t.Fatal("a forwarded MULTI started the proxy's transaction")
	}
	st.Apply(&Decision{Effect: Multi, Action: Local})
	st.MultiAborted = true
	st.Apply(&Decision{Effect: Multi, Action: Local})
	if !st.InMulti || st.MultiAborted {
		t.Fatalf("after MULTI: %+v", st)
	}
	st.Apply(&Decision{Effect: Discard})
	if st.InMulti {
		t.Fatal("DISCARD left the transaction")
	}
	st.Apply(&Decision{Effect: Wire6})
	if !st.Wire6 {
		t.Fatal("EMQ.VERSION")
	}
	st.Apply(&Decision{Effect: Reset})
	want := State{ID: 7, Addr: "a:1", LocalAddr: "l:2", LibName: []byte("lib")}
	if st.ID != want.ID || st.Addr != want.Addr || st.LocalAddr != want.LocalAddr || string(st.LibName) != "lib" ||
		st.LibVer != nil || st.Authenticated || st.User != "" || st.Proto != 0 || st.Wire6 || st.Fenced || st.Name != nil {
		t.Fatalf("after RESET: %+v", st)
	}
}
