package rewrite

import (
	"strconv"

	"github.com/emqproxy/emqproxy/resp"
)

// ClientInfo is one client's line of CLIENT INFO and CLIENT LIST: the
// fields a proxy session can know; the server's other fields (argv-mem,
// multi-mem, rbs, rbp, obl, oll, omem, tot-mem) are 0, redir -1.
type ClientInfo struct {
	ID              int64
	Addr, LocalAddr string
	FD              int // -1 when unknown
	Name            []byte
	Age, Idle       int64  // seconds
	Flags           string // "" is the server's N
	DB              int
	Sub, PSub, SSub int
	Multi           int // queued commands; -1 outside MULTI
	QBuf, QBufFree  int
	Cmd             string // the last command's full name ("client|list"); "" is NULL
	User            string // "" is default
	Proto           int
	// Lib shows lib-name and lib-ver (LibName, LibVer) after resp, as a
	// server that has CLIENT SETINFO does (State.SetInfo).
	Lib             bool
	LibName, LibVer []byte
}

// AppendClientInfo appends c's line, ending in "\n", in the server's field
// order (Redis 7.0's: of the fields Valkey 8 adds after resp, only lib-name
// and lib-ver are shown, with Lib).
func AppendClientInfo(b []byte, c *ClientInfo) []byte {
	b = append(b, "id="...)
	b = strconv.AppendInt(b, c.ID, 10)
	b = append(b, " addr="...)
	b = append(b, c.Addr...)
	b = append(b, " laddr="...)
	b = append(b, c.LocalAddr...)
	b = append(b, " fd="...)
	b = strconv.AppendInt(b, int64(c.FD), 10)
	b = append(b, " name="...)
	b = append(b, c.Name...)
	b = append(b, " age="...)
	b = strconv.AppendInt(b, c.Age, 10)
	b = append(b, " idle="...)
	b = strconv.AppendInt(b, c.Idle, 10)
	b = append(b, " flags="...)
	if c.Flags == "" {
		b = append(b, 'N')
	} else {
		b = append(b, c.Flags...)
	}
	b = append(b, " db="...)
	b = strconv.AppendInt(b, int64(c.DB), 10)
	b = append(b, " sub="...)
	b = strconv.AppendInt(b, int64(c.Sub), 10)
	b = append(b, " psub="...)
	b = strconv.AppendInt(b, int64(c.PSub), 10)
	b = append(b, " ssub="...)
	b = strconv.AppendInt(b, int64(c.SSub), 10)
	b = append(b, " multi="...)
	b = strconv.AppendInt(b, int64(c.Multi), 10)
	b = append(b, " qbuf="...)
	b = strconv.AppendInt(b, int64(c.QBuf), 10)
	b = append(b, " qbuf-free="...)
	b = strconv.AppendInt(b, int64(c.QBufFree), 10)
	b = append(b, " argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd="...)
	if c.Cmd == "" {
		b = append(b, "NULL"...)
	} else {
		b = append(b, c.Cmd...)
	}
	b = append(b, " user="...)
	if c.User == "" {
		b = append(b, "default"...)
	} else {
		b = append(b, c.User...)
	}
	b = append(b, " redir=-1 resp="...)
	if c.Proto == 3 {
		b = append(b, '3')
	} else {
		b = append(b, '2')
	}
	if c.Lib {
		b = append(b, " lib-name="...)
		b = append(b, c.LibName...)
		b = append(b, " lib-ver="...)
		b = append(b, c.LibVer...)
	}
	return append(b, '\n')
}

// ClientListReply is the reply to CLIENT LIST or CLIENT INFO with lines
// (AppendClientInfo's, concatenated) in protocol proto: a bulk string in
// RESP2, a verbatim string in RESP3, as the server answers.
func ClientListReply(lines []byte, proto int) []byte {
	if proto == 3 {
		return verbatimReply(lines)
	}
	return bulkReply(lines)
}

// ClientFilter selects the clients a CLIENT LIST answers (or, with Info,
// CLIENT INFO: the session itself).
type ClientFilter struct {
	Info bool
	// Type, when not "", keeps the clients of that type: "normal",
	// "pubsub" (subscribed to something), "master" or "replica" (a proxy
	// session is never one of these two).
	Type string
	// IDs, when not nil, lists the clients with these ids, in this order,
	// each as often as it is named; unknown ids are skipped.
	IDs []int64
}

// clientInfo is the CLIENT INFO line of a server whose only client is this
// session, as rewrite knows it (fd, age and idle unknown: -1, 0, 0).
func clientInfo(st *State, p *Policy, cmd string) []byte {
	c := ClientInfo{ID: st.ID, Addr: st.Addr, LocalAddr: st.LocalAddr, FD: -1, Name: st.Name, DB: p.DB,
		Multi: -1, Cmd: cmd, User: st.User, Proto: st.Proto, Lib: st.SetInfo, LibName: st.LibName, LibVer: st.LibVer}
	return AppendClientInfo(make([]byte, 0, 320), &c)
}

// decideClientList parses CLIENT LIST [TYPE type | ID id [id ...]] as the
// server does (Redis 7.0 and Valkey 8 alike: TYPE alone with its one
// argument, ID with every argument after it an id).
func decideClientList(args [][]byte, st *State, p *Policy) Decision {
	f := &ClientFilter{}
	switch {
	case len(args) == 4 && EqualFold(args[2], "TYPE"):
		switch {
		case EqualFold(args[3], "NORMAL"):
			f.Type = "normal"
		case EqualFold(args[3], "PUBSUB"):
			f.Type = "pubsub"
		case EqualFold(args[3], "MASTER"):
			f.Type = "master"
		case EqualFold(args[3], "REPLICA"), EqualFold(args[3], "SLAVE"):
			f.Type = "replica"
		default:
			return refuse(errReply("ERR Unknown client type '"+string(args[3])+"'"), ReasonProtocol)
		}
	case len(args) > 3 && EqualFold(args[2], "ID"):
		f.IDs = make([]int64, 0, len(args)-3)
		for _, a := range args[3:] {
			id, ok := resp.ParseInt(a)
			if !ok {
				return refuse(errReply("ERR Invalid client ID"), ReasonProtocol)
			}
			f.IDs = append(f.IDs, id)
		}
	case len(args) != 2:
		return refuse(replySyntax, ReasonProtocol)
	}
	var lines []byte
	self := clientInfo(st, p, "client|list")
	switch {
	case f.IDs != nil:
		for _, id := range f.IDs {
			if id == st.ID {
				lines = append(lines, self...)
			}
		}
	case f.Type == "" || f.Type == "normal" && !st.Subscribed || f.Type == "pubsub" && st.Subscribed:
		lines = self
	}
	d := local(ClientListReply(lines, st.Proto), ClientList)
	d.List = f
	return d
}
