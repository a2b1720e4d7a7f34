package session

import (
	"cmp"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/rewrite"
)

// CLIENT LIST and CLIENT INFO.
//
// The proxy answers both about its own clients, the live sessions of its
// Server (Server.sessions), in the server's line format
// (rewrite.AppendClientInfo, Redis 7.0's fields): a client sees the other
// clients of its proxy, never the proxy's upstream connections. CLIENT
// LIST TYPE and ID select as the server does (rewrite/ parses them;
// master and replica list nothing), in id order, or in the order of the
// ids named.
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

// clientView is what the other sessions' CLIENT LIST shows of a session:
// the session writes it at the end of each batch (publish), the relay its
// subscription counts.
type clientView struct {
	// Set once by newSession.
	created time.Time
	fd      int
	laddr   string

	// The session's own, read and written by its goroutine alone: the
	// last command's arguments, until publish copies its name (they are
	// the framer's, not valid after its next reset).
	lastArgs [][]byte

	mu    sync.Mutex
	name  []byte    // replaced, never modified, by the session
	lib   [2][]byte // lib-name, lib-ver: replaced, never modified
	user  string
	proto int
	multi int
	last  time.Time
	cmd   [2]viewName // the last command's name and first argument
	qbuf  int
	qfree int

	subs     pubsub.Counts // the relay's (subscribe mode)
	blocked  atomic.Bool   // waiting on a blocking command
	blockGen atomic.Uint64 // counts the waits (clientkill.go)
	// blockOn is the connection blocking commands go on, with its id on
	// the server (clientkill.go).
	blockOn atomic.Pointer[blockConn]
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

// init sets what does not change.
func (v *clientView) init(nc net.Conn, now time.Time) {
	v.created, v.last, v.fd, v.laddr, v.multi = now, now, connFD(nc), nc.LocalAddr().String(), -1
	v.cmd[0].n, v.cmd[1].n = -1, -1
}

// publish writes the session's view as of now.
func (s *session) publish(at time.Time) {
	v := &s.listing
	v.mu.Lock()
	v.name, v.user, v.proto = s.st.Name, s.st.User, s.proto()
	v.lib = [2][]byte{s.st.LibName, s.st.LibVer}
	v.multi = -1
	if s.st.InMulti {
		v.multi = s.tx.n
	}
	if !at.IsZero() {
		v.last = at
	}
	if a := v.lastArgs; len(a) > 0 {
		v.cmd[0].set(a[0], true)
		v.cmd[1].set(a[min(1, len(a)-1)], len(a) > 1)
		v.lastArgs = nil // the framer's: not valid after its next reset
	}
	v.qbuf, v.qfree = s.end-s.start, len(s.buf)-s.end
	v.mu.Unlock()
}

// info is the session's CLIENT LIST line's fields as of its last publish.
func (s *session) info(now time.Time, db int) (c rewrite.ClientInfo, subscribed bool) {
	v := &s.listing
	c = rewrite.ClientInfo{ID: int64(s.id), Addr: s.addr, LocalAddr: v.laddr, FD: v.fd, DB: db}
	c.Sub, c.PSub, c.SSub = v.subs.Get()
	v.mu.Lock()
	c.Name, c.User, c.Proto, c.Multi = v.name, v.user, v.proto, v.multi
	c.LibName, c.LibVer = v.lib[0], v.lib[1]
	c.QBuf, c.QBufFree = v.qbuf, v.qfree
	last, cmd := v.last, v.cmd
	v.mu.Unlock()
	c.Age, c.Idle = int64(now.Sub(v.created)/time.Second), int64(max(now.Sub(last), 0)/time.Second)
	c.Cmd = fullName(s.srv.Keys, &cmd)
	c.Lib = s.srv.Keys.SetInfo()
	subscribed = c.Sub+c.PSub+c.SSub > 0
	var flags []byte
	if subscribed {
		flags = append(flags, 'P')
	}
	if c.Multi >= 0 {
		flags = append(flags, 'x')
	}
	if v.blocked.Load() {
		flags = append(flags, 'b')
	}
	c.Flags = string(flags)
	return c, subscribed
}

// clientList answers CLIENT LIST or CLIENT INFO (f) for the session.
func (s *session) clientList(f *rewrite.ClientFilter) []byte {
	s.publish(time.Time{})
	now := time.Now()
	self := "client|list"
	var list []*session
	switch {
	case f.Info:
		list, self = []*session{s}, "client|info"
	case f.IDs != nil:
		byID := map[uint64]*session{}
		s.srv.Sessions.mu.Lock()
		for sess := range s.srv.Sessions.m {
			byID[sess.id] = sess
		}
		s.srv.Sessions.mu.Unlock()
		for _, id := range f.IDs {
			if sess := byID[uint64(id)]; sess != nil && id > 0 { // ids start at 1
				list = append(list, sess)
			}
		}
	case f.Type == "master" || f.Type == "replica":
	default:
		s.srv.Sessions.mu.Lock()
		for sess := range s.srv.Sessions.m {
			list = append(list, sess)
		}
		s.srv.Sessions.mu.Unlock()
		slices.SortFunc(list, func(a, b *session) int { return cmp.Compare(a.id, b.id) })
	}
	var lines []byte
	for _, sess := range list {
		c, pubsub := sess.info(now, s.v.Pol.DB)
		if f.Type == "pubsub" && !pubsub || f.Type == "normal" && pubsub {
			continue
		}
		if sess == s {
			c.Cmd, c.Idle = self, 0
		}
		lines = rewrite.AppendClientInfo(lines, &c)
	}
	return rewrite.ClientListReply(lines, s.proto())
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
