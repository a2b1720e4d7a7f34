package rewrite

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"strconv"

	"github.com/emqproxy/emqproxy/resp"
)

// decideAuth answers AUTH [user] password.
func decideAuth(args [][]byte, p *Policy) Decision {
	user, pw := []byte("default"), []byte(nil)
	switch len(args) {
	case 1:
		return refuse(arityReply("auth"), ReasonArity)
	case 2:
		if len(p.Users) == 0 {
			return refuse(replyNoPass, ReasonWrongPass)
		}
		pw = args[1]
	case 3:
		user, pw = args[1], args[2]
	default:
		return refuse(replySyntax, ReasonArity)
	}
	if !authenticate(user, pw, p) {
		return refuse(replyWrongPass, ReasonWrongPass)
	}
	d := local(replyOK, Auth)
	d.User = string(user)
	return d
}

// authenticate checks a user's password in constant time. With no users
// configured, the server's default user has no password and accepts any.
func authenticate(user, pw []byte, p *Policy) bool {
	if len(p.Users) == 0 {
		return string(user) == "default"
	}
	want, ok := p.Users[string(user)]
	// Compare digests so neither the length nor the content of the
	// configured password shows in the timing, even for an unknown user.
	w := sha256.Sum256([]byte(want))
	g := sha256.Sum256(pw)
	eq := subtle.ConstantTimeCompare(w[:], g[:]) == 1
	return ok && eq
}

// decideHello answers HELLO [protover [AUTH user pass] [SETNAME name]] as
// the server does: protocol 2 or 3 (others get NOPROTO), the reply in the
// protocol the session speaks from now on.
func decideHello(args [][]byte, st *State, p *Policy) Decision {
	cur := st.Proto
	if cur != 3 {
		cur = 2
	}
	proto := cur
	if len(args) >= 2 {
		ver, ok := resp.ParseInt(args[1])
		if !ok {
			return refuse(replyProtoNotInt, ReasonProtocol)
		}
		if ver != 2 && ver != 3 {
			return refuse(replyNoProto, ReasonProtocol)
		}
		proto = int(ver)
	}
	var user, pw, name []byte
	hasAuth, setsName := false, false
	for j := 2; j < len(args); j++ {
		more := len(args) - 1 - j
		switch {
		case EqualFold(args[j], "AUTH") && more >= 2:
			user, pw, hasAuth = args[j+1], args[j+2], true
			j += 2
		case EqualFold(args[j], "SETNAME") && more >= 1:
			name, setsName = args[j+1], true
			if !validName(name) {
				return refuse(replyBadName, ReasonProtocol)
			}
			j++
		default:
			return refuse(errReply("ERR Syntax error in HELLO option '"+string(args[j])+"'"), ReasonProtocol)
		}
	}
	if proto != cur && st.Watching {
		// The WATCH lives on a connection of the client's own, which
		// speaks the protocol it was opened in.
		return refuse(replyHelloWatch, ReasonProtocol)
	}
	if proto != cur && st.Tracking {
		// Its tracking lives on RESP2 connections of its own.
		return refuse(replyHelloTracking, ReasonProtocol)
	}
	d := local(helloReply(st, p, proto), Hello)
	d.Proto = proto
	if hasAuth {
		if !authenticate(user, pw, p) {
			return refuse(replyWrongPass, ReasonWrongPass)
		}
		d.User = string(user)
	} else if len(p.Users) > 0 && !st.Authenticated {
		return refuse(replyHelloNA, ReasonNoAuth)
	}
	d.Arg, d.SetsName = name, setsName
	return d
}

// helloReply is the server's HELLO reply for this session in protocol
// proto: an array of 14 in RESP2, a map of 7 in RESP3, with the same
// fields (the id is the session's; the version is Policy.ServerVersion).
func helloReply(st *State, p *Policy, proto int) []byte {
	ver := p.ServerVersion
	if ver == "" {
		ver = DefaultServerVersion
	}
	b := make([]byte, 0, 160)
	if proto == 3 {
		b = append(b, "%7\r\n"...)
	} else {
		b = append(b, "*14\r\n"...)
	}
	b = append(b, "$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n"...)
	b = resp.AppendBulk(b, []byte(ver))
	b = append(b, "$5\r\nproto\r\n"...)
	b = resp.AppendInt(b, int64(proto))
	b = append(b, "$2\r\nid\r\n"...)
	b = resp.AppendInt(b, st.ID)
	b = append(b, "$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"...)
	return b
}

// resp3Null is a local reply in RESP3: a nil bulk or nil array becomes
// RESP3's null; every other reply is the same in both protocols.
func resp3Null(r []byte) []byte {
	if bytes.Equal(r, replyNil) || bytes.Equal(r, replyNilArray) {
		return replyNull
	}
	return r
}

// validName is the server's client name rule: printable ASCII without
// spaces; empty clears the name.
func validName(b []byte) bool {
	for _, c := range b {
		if c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// decidePing answers PING [message]; inside MULTI the server answers it.
func decidePing(args [][]byte, st *State) Decision {
	switch {
	case len(args) > 2:
		return refuse(arityReply("ping"), ReasonArity)
	case st.InMulti:
		return Decision{Action: Pass}
	case len(args) == 1:
		return local(replyPong, NoEffect)
	}
	return local(bulkReply(args[1]), NoEffect)
}

// decideEcho answers ECHO message; inside MULTI the server answers it.
func decideEcho(args [][]byte, st *State) Decision {
	switch {
	case len(args) != 2:
		return refuse(arityReply("echo"), ReasonArity)
	case st.InMulti:
		return Decision{Action: Pass}
	}
	return local(bulkReply(args[1]), NoEffect)
}

// decideSelect accepts only the configured database.
func decideSelect(args [][]byte, st *State, p *Policy) Decision {
	if len(args) != 2 {
		return refuse(arityReply("select"), ReasonArity)
	}
	n, ok := resp.ParseInt(args[1])
	if !ok || n < -1<<31 || n > 1<<31-1 {
		return refuse(replyNotInt, ReasonSelect)
	}
	if n != int64(p.DB) {
		return refuse(errReply("ERR SELECT is not allowed: emqproxy serves database "+
			strconv.Itoa(p.DB)+" only"), ReasonSelect)
	}
	if st.InMulti {
		// The upstream connection is already on p.DB: the server answers it
		// in EXEC's reply.
		return Decision{Action: Pass}
	}
	return local(replyOK, NoEffect)
}

// decideClient answers the connection-local CLIENT subcommands and refuses
// those that would change a shared upstream connection. ok is false for
// the others, which go on through the rule.
func decideClient(args [][]byte, st *State, p *Policy) (Decision, bool) {
	if len(args) < 2 {
		return refuse(arityReply("client"), ReasonArity), true
	}
	sub := args[1]
	switch {
	case EqualFold(sub, "SETNAME"):
		if len(args) != 3 {
			return refuse(arityReply("client|setname"), ReasonArity), true
		}
		if !validName(args[2]) {
			return refuse(replyBadName, ReasonProtocol), true
		}
		d := local(replyOK, SetName)
		d.Arg, d.SetsName = args[2], true
		return d, true
	case EqualFold(sub, "GETNAME"):
		if len(args) != 2 {
			return refuse(arityReply("client|getname"), ReasonArity), true
		}
		if len(st.Name) == 0 {
			return local(replyNil, NoEffect), true
		}
		return local(bulkReply(st.Name), NoEffect), true
	case EqualFold(sub, "ID"):
		if len(args) != 2 {
			return refuse(arityReply("client|id"), ReasonArity), true
		}
		return local(resp.AppendInt(nil, st.ID), NoEffect), true
	case EqualFold(sub, "INFO"):
		if len(args) != 2 {
			return refuse(arityReply("client|info"), ReasonArity), true
		}
		d := local(ClientListReply(clientInfo(st, p, "client|info"), st.Proto), ClientList)
		d.List = &ClientFilter{Info: true}
		return d, true
	case EqualFold(sub, "LIST"):
		return decideClientList(args, st, p), true
	case EqualFold(sub, "SETINFO") && st.SetInfo:
		return decideSetInfo(args), true
	case EqualFold(sub, "UNBLOCK") && opened(p, "CLIENT UNBLOCK"):
		return decideUnblock(args), true
	case EqualFold(sub, "KILL") && opened(p, "CLIENT KILL"):
		if d, ok := decideKill(args); ok {
			return d, true
		}
	case EqualFold(sub, "NO-EVICT"), EqualFold(sub, "NO-TOUCH"):
		if len(args) != 3 {
			var buf [maxName]byte
			return refuse(arityReply("client|"+string(LowerInto(buf[:0], sub))), ReasonArity), true
		}
		if !EqualFold(args[2], "ON") && !EqualFold(args[2], "OFF") {
			return refuse(replySyntax, ReasonProtocol), true
		}
		return local(replyOK, NoEffect), true
	case EqualFold(sub, "TRACKING"):
		switch {
		case st.InMulti:
			return refuse(errReply("EMQREFUSED emqproxy does not queue 'CLIENT TRACKING' in MULTI: "+
				"it would put a shared upstream connection in tracking mode"), ReasonProtocol), true
		case st.Proto != 3:
			// RESP2: the session tracks on connections of the client's
			// own, its REDIRECT bridged (package proxy/tracking).
			return local(nil, Tracking), true
		case trackingRedirects(args):
			return refuse(replyTrackingRedirect3, ReasonProtocol), true
		}
		// A RESP3 client's invalidations are pushed on its own connection:
		// the client is bridged to a connection of its own (Subscribe).
		return Decision{Action: Pass, Effect: Subscribe}, true
	case (EqualFold(sub, "GETREDIR") || EqualFold(sub, "TRACKINGINFO")) && st.Proto != 3 && !st.InMulti:
		if len(args) != 2 {
			var buf [maxName]byte
			return refuse(arityReply("client|"+string(LowerInto(buf[:0], sub))), ReasonArity), true
		}
		if EqualFold(sub, "GETREDIR") {
			return local(nil, TrackingGetRedir), true
		}
		return local(nil, TrackingInfo), true
	case EqualFold(sub, "CACHING"):
		// Meaningful only with tracking, on the client's own connection;
		// elsewhere the server refuses it.
		return Decision{Action: Pass}, true
	case EqualFold(sub, "REPLY"):
		// The client's own business: the session silences its replies
		// (Effect ReplyOn/ReplyOff/ReplySkip); the shared connection never
		// sees it.
		if len(args) != 3 {
			return refuse(arityReply("client|reply"), ReasonArity), true
		}
		switch {
		case EqualFold(args[2], "ON"):
			return local(replyOK, ReplyOn), true
		case EqualFold(args[2], "OFF"):
			return local(nil, ReplyOff), true
		case EqualFold(args[2], "SKIP"):
			return local(nil, ReplySkip), true
		}
		return refuse(replySyntax, ReasonProtocol), true
	}
	return Decision{}, false
}

// LowerInto appends the ASCII lower case of s to dst. The proxy's key
// table looks command names up with it too.
func LowerInto(dst, s []byte) []byte {
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// decideSetInfo answers CLIENT SETINFO LIB-NAME|LIB-VER <value> for the
// session, with the server's (Valkey 8's) errors: it would name the shared
// upstream connection for every client on it.
func decideSetInfo(args [][]byte) Decision {
	if len(args) != 4 {
		return refuse(arityReply("client|setinfo"), ReasonArity)
	}
	var d Decision
	switch {
	case EqualFold(args[2], "LIB-NAME"):
		d = local(replyOK, SetLibName)
	case EqualFold(args[2], "LIB-VER"):
		d = local(replyOK, SetLibVer)
	default:
		return refuse(errReply("ERR Unrecognized option '"+string(args[2])+"'"), ReasonProtocol)
	}
	for _, c := range args[3] {
		if c < '!' || c > '~' {
			return refuse(errReply("ERR "+string(args[2])+" cannot contain spaces, newlines or special characters."), ReasonProtocol)
		}
	}
	d.Arg = args[3]
	return d
}

// opened reports whether policy.allow opens entry ("CLIENT KILL"), by its
// name or its command's.
func opened(p *Policy, entry string) bool {
	return p.Allow["CLIENT"] || p.Allow[entry]
}

// decideUnblock answers CLIENT UNBLOCK <id> [TIMEOUT|ERROR] with the
// server's errors; the session answers the rest for its server's clients
// (a server's id on a shared connection names none of them).
func decideUnblock(args [][]byte) Decision {
	switch {
	case len(args) < 3:
		return refuse(arityReply("client|unblock"), ReasonArity)
	case len(args) > 4:
		return refuse(errReply("ERR unknown subcommand or wrong number of arguments for '"+string(args[1])+
			"'. Try CLIENT HELP."), ReasonArity)
	}
	t := &ClientTarget{}
	if len(args) == 4 {
		switch {
		case EqualFold(args[3], "TIMEOUT"):
		case EqualFold(args[3], "ERROR"):
			t.Error = true
		default:
			return refuse(errReply("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"), ReasonProtocol)
		}
	}
	id, ok := resp.ParseInt(args[2])
	if !ok {
		return refuse(replyNotInt, ReasonProtocol)
	}
	t.ID = id
	d := local([]byte(":0\r\n"), ClientUnblock)
	d.Target = t
	return d
}

// decideKill answers CLIENT KILL whose filters are ID and SKIPME alone,
// with the server's errors; ok is false for every other form (the old
// CLIENT KILL <addr>, ADDR, LADDR, TYPE, USER, MAXAGE), which goes on
// through the deny list and the rule.
func decideKill(args [][]byte) (d Decision, ok bool) {
	if len(args) < 4 || len(args)%2 != 0 {
		return Decision{}, false
	}
	for i := 2; i < len(args); i += 2 {
		if !EqualFold(args[i], "ID") && !EqualFold(args[i], "SKIPME") {
			return Decision{}, false
		}
	}
	t := &ClientTarget{SkipMe: true}
	for i := 2; i < len(args); i += 2 {
		v := args[i+1]
		if EqualFold(args[i], "ID") {
			id, ok := resp.ParseInt(v)
			if !ok || id < 1 {
				return refuse(errReply("ERR client-id should be greater than 0"), ReasonProtocol), true
			}
			t.ID = id
			continue
		}
		switch {
		case EqualFold(v, "YES"):
			t.SkipMe = true
		case EqualFold(v, "NO"):
			t.SkipMe = false
		default:
			return refuse(replySyntax, ReasonProtocol), true
		}
	}
	d = local([]byte(":0\r\n"), ClientKill)
	d.Target = t
	return d, true
}

// decideWhoami answers ACL WHOAMI with the session's own user, the one it
// authenticated as (default otherwise), as the server answers a client of
// its own; on a shared connection it would name the proxy's upstream user.
func decideWhoami(args [][]byte, st *State) Decision {
	if len(args) != 2 {
		return refuse(arityReply("acl|whoami"), ReasonArity)
	}
	user := st.User
	if user == "" {
		user = "default"
	}
	return local(bulkReply([]byte(user)), NoEffect)
}

// trackingRedirects reports whether CLIENT TRACKING names a REDIRECT
// option, read as the server reads the options (REDIRECT and PREFIX take
// a value).
func trackingRedirects(args [][]byte) bool {
	for j := 3; j < len(args); j++ {
		switch {
		case EqualFold(args[j], "REDIRECT") && j+1 < len(args):
			return true
		case EqualFold(args[j], "PREFIX") && j+1 < len(args):
			j++
		}
	}
	return false
}
