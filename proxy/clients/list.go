package clients

import (
	"cmp"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/rewrite"
)

// CLIENT LIST and CLIENT INFO.
//
// The proxy answers both about its own clients, the live sessions of its
// server's Registry, in the server's line format (rewrite.AppendClientInfo,
// Redis 7.0's fields): a client sees the other clients of its proxy, never
// the proxy's upstream connections. CLIENT LIST TYPE and ID select as the
// server does (rewrite/ parses them; master and replica list nothing), in
// id order, or in the order of the ids named.
//
// Real values: id (the session's, as CLIENT ID and HELLO), addr and laddr
// (the client's connection to the proxy), fd (that socket's descriptor in
// the proxy process), name, age and idle (seconds since the connection
// and since its last batch of commands), flags (P subscribed, x in MULTI,
// b waiting on a blocking command, N none), db (the configured database),
// sub, psub and ssub (from the server's subscribe confirmations), multi
// (commands queued, -1 outside MULTI), qbuf and qbuf-free (the session's
// read buffer), cmd (the last command the client sent, by the server's own
// full name, NULL for an unknown one), user and resp, and where the server
// has CLIENT SETINFO (Valkey 8), lib-name and lib-ver, which the proxy
// answers for the session. The memory and
// output buffer fields are 0, redir -1, events r. Another session's line
// is as of the end of its last batch: a reply it was sent (CLIENT
// SETNAME's +OK) is always listed after.

// View is what the other sessions' CLIENT LIST shows of a session: the
// session publishes it at the end of each batch (Publish), the relay
// keeps its subscription counts. Init sets it up before the session is
// listed. It holds the client's address too, so that a line needs nothing
// of the session but its id and its View.
//
// The values under its lock are written through Publish alone, all at
// once, as Fields the session fills from its own state. The others are
// exported fields, written where they change: LastArgs by the session's
// goroutine as it takes each command (and read by it alone), Subs by the
// relay (package pubsub), Blocked, BlockGen and BlockOn by the session's
// goroutine around a blocking command, these three read by any session.
type View struct {
	// Set once by Init.
	created time.Time
	fd      int
	addr    string
	laddr   string

	// LastArgs is the session's own, read and written by its goroutine
	// alone: the last command's arguments, until Publish copies its name
	// (they are the framer's, not valid after its next reset).
	LastArgs [][]byte

	mu   sync.Mutex
	pub  Fields
	last time.Time
	cmd  [2]viewName // the last command's name and first argument

	Subs     pubsub.Counts // the relay's (subscribe mode)
	Blocked  atomic.Bool   // waiting on a blocking command
	BlockGen atomic.Uint64 // counts the waits (kill.go)
	// BlockOn is the connection blocking commands go on, with its id on
	// the server (kill.go).
	BlockOn atomic.Pointer[BlockConn]
}

// Fields are the values of a session's CLIENT LIST line that only its
// goroutine knows, as of the end of a batch.
type Fields struct {
	Name     []byte    // replaced, never modified, by the session
	Lib      [2][]byte // lib-name, lib-ver: replaced, never modified
	User     string
	Proto    int
	Multi    int // commands queued, -1 outside MULTI
	QBuf     int // the read buffer's unread bytes
	QBufFree int // and its room after them
}

// viewName is a short copy of a command name (longer ones are unknown).
type viewName struct {
	b   [32]byte
	n   int8 // -1: none
	far bool // longer than b
}

func (v *viewName) set(a []byte, ok bool) {
	v.n, v.far = -1, false
	if !ok {
		return
	}
	v.far = len(a) > len(v.b)
	v.n = int8(copy(v.b[:], a))
}

// Init sets what does not change: the session's client address (addr)
// and connection (nc), accepted now.
func (v *View) Init(addr string, nc net.Conn, now time.Time) {
	_, laddr := netaddr.Peer(nc)
	v.created, v.last, v.fd, v.addr, v.laddr, v.pub.Multi = now, now, connFD(nc), addr, laddr, -1
	v.cmd[0].n, v.cmd[1].n = -1, -1
}

// Publish writes the session's view as of at (the zero time keeps the
// last batch's): its fields f and the name of the command LastArgs holds.
// Only the session's goroutine calls it.
func (v *View) Publish(at time.Time, f Fields) {
	v.mu.Lock()
	v.pub = f
	if !at.IsZero() {
		v.last = at
	}
	if a := v.LastArgs; len(a) > 0 {
		v.cmd[0].set(a[0], true)
		v.cmd[1].set(a[min(1, len(a)-1)], len(a) > 1)
		v.LastArgs = nil // the framer's: not valid after its next reset
	}
	v.mu.Unlock()
}

// info is the CLIENT LIST line's fields of session id as of its last
// Publish, with ks the server's command tables.
func (v *View) info(id uint64, now time.Time, db int, ks *cmdtable.Store) (c rewrite.ClientInfo, subscribed bool) {
	c = rewrite.ClientInfo{ID: int64(id), Addr: v.addr, LocalAddr: v.laddr, FD: v.fd, DB: db}
	c.Sub, c.PSub, c.SSub = v.Subs.Get()
	v.mu.Lock()
	p := &v.pub
	c.Name, c.User, c.Proto, c.Multi = p.Name, p.User, p.Proto, p.Multi
	c.LibName, c.LibVer = p.Lib[0], p.Lib[1]
	c.QBuf, c.QBufFree = p.QBuf, p.QBufFree
	last, cmd := v.last, v.cmd
	v.mu.Unlock()
	c.Age, c.Idle = int64(now.Sub(v.created)/time.Second), int64(max(now.Sub(last), 0)/time.Second)
	c.Cmd = fullName(ks, &cmd)
	c.Lib = ks.SetInfo()
	subscribed = c.Sub+c.PSub+c.SSub > 0
	var flags []byte
	if subscribed {
		flags = append(flags, 'P')
	}
	if c.Multi >= 0 {
		flags = append(flags, 'x')
	}
	if v.Blocked.Load() {
		flags = append(flags, 'b')
	}
	c.Flags = string(flags)
	return c, subscribed
}

// List answers CLIENT LIST or CLIENT INFO (f) for self, which published
// its view just before: ks is the server's command tables, db the
// configured database, proto self's protocol.
func (r *Registry[C]) List(self C, f *rewrite.ClientFilter, ks *cmdtable.Store, db, proto int) []byte {
	now := time.Now()
	name := "client|list"
	var list []C
	switch {
	case f.Info:
		list, name = []C{self}, "client|info"
	case f.IDs != nil:
		for _, id := range f.IDs {
			if c, ok := r.byID(uint64(id)); ok && id > 0 { // ids start at 1
				list = append(list, c)
			}
		}
	case f.Type == "master" || f.Type == "replica":
	default:
		r.mu.Lock()
		for _, c := range r.m {
			list = append(list, c)
		}
		r.mu.Unlock()
		slices.SortFunc(list, func(a, b C) int { return cmp.Compare(a.ID(), b.ID()) })
	}
	var lines []byte
	for _, c := range list {
		ci, subscribed := c.View().info(c.ID(), now, db, ks)
		if f.Type == "pubsub" && !subscribed || f.Type == "normal" && subscribed {
			continue
		}
		if c == self {
			ci.Cmd, ci.Idle = name, 0
		}
		lines = rewrite.AppendClientInfo(lines, &ci)
	}
	return rewrite.ClientListReply(lines, proto)
}

// fullName is the server's full name (in ks) of the command a view names
// ("client|list"), "" (NULL) for a command the server does not know, or
// the name as sent, in lower case, before the table is loaded.
func fullName(ks *cmdtable.Store, cmd *[2]viewName) string {
	a0 := &cmd[0]
	if a0.n < 0 || a0.far {
		return ""
	}
	var buf [32]byte
	name := rewrite.LowerInto(buf[:0], a0.b[:a0.n])
	t := ks.Table()
	if t == nil {
		return string(name)
	}
	c := t[string(name)]
	switch {
	case c == nil:
		return ""
	case c.Subs == nil || cmd[1].n < 0:
		return c.Name
	case cmd[1].far:
		return ""
	}
	sc := c.Subs[string(rewrite.LowerInto(buf[:0], cmd[1].b[:cmd[1].n]))]
	if sc == nil {
		return ""
	}
	return sc.Name
}

// connFD is the descriptor of a client's socket, -1 when it has none.
func connFD(nc net.Conn) int {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	_ = rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}
