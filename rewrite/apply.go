package rewrite

// Apply makes a decision's effect on the protocol state, once its reply
// has its place: what AUTH, HELLO, CLIENT SETNAME, CLIENT SETINFO,
// EMQ.VERSION, MULTI answered by the proxy, DISCARD and RESET change of
// it. RESET keeps the connection's id and addresses, and lib-name and
// lib-ver, as the server does (Valkey 8); the state the caller reads from
// elsewhere (Fenced, NoSub, SetInfo) is its to set again. What a decision
// changes of the connections (a transaction's queue, a WATCH, a tracking
// client's connections) is the caller's.
func (st *State) Apply(d *Decision) {
	switch d.Effect {
	case Reset:
		*st = State{ID: st.ID, Addr: st.Addr, LocalAddr: st.LocalAddr, LibName: st.LibName, LibVer: st.LibVer}
	case Auth:
		st.Authenticated, st.User = true, d.User
	case SetName:
		st.setName(d)
	case SetLibName:
		st.LibName = clientAttr(d.Arg)
	case SetLibVer:
		st.LibVer = clientAttr(d.Arg)
	case Hello:
		if d.User != "" {
			st.Authenticated, st.User = true, d.User
		}
		st.setName(d)
		if d.Proto != 0 && d.Proto != st.proto() {
			st.Proto = d.Proto
		}
	case Wire6:
		st.Wire6 = true
	case Multi:
		if d.Action == Local {
			st.InMulti, st.MultiAborted = true, false
		}
	case Discard:
		st.EndMulti()
	}
}

// EndMulti ends the client's transaction on the protocol state: DISCARD
// (Apply), and EXEC, whose end the caller makes once it is sent.
func (st *State) EndMulti() { st.InMulti, st.MultiAborted = false, false }

// proto is the protocol the client speaks, 2 or 3.
func (st *State) proto() int {
	if st.Proto == 3 {
		return 3
	}
	return 2
}

// setName applies a CLIENT SETNAME or HELLO SETNAME.
func (st *State) setName(d *Decision) {
	if !d.SetsName {
		return
	}
	if len(d.Arg) == 0 {
		st.Name = nil
	} else {
		st.Name = append([]byte(nil), d.Arg...)
	}
}

// clientAttr is a copy of a CLIENT SETINFO value, nil for "" (cleared).
func clientAttr(a []byte) []byte {
	if len(a) == 0 {
		return nil
	}
	return append([]byte(nil), a...)
}
