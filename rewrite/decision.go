package rewrite

import "github.com/emqproxy/emqproxy/shamap"

// Action is what the session does with a command.
type Action uint8

const (
	// Pass forwards the command exactly as the client sent it.
	Pass Action = iota
	// Rewrite forwards the command with its first Replace arguments
	// replaced by Head; every other byte is the client's.
	Rewrite
	// Refuse answers Reply and forwards nothing. Refusals are audited. The
	// session still applies Effect (AbortMulti, or Discard for an EXEC that
	// ends a transaction with an error).
	Refuse
	// Local answers Reply (after applying Effect) and forwards nothing.
	// Inside MULTI, Decide returns Local only for MULTI, EXEC, DISCARD,
	// QUIT and RESET: a command the proxy would answer itself is refused
	// when queued, so the session never splices a local reply into EXEC's.
	Local
)

// String names the action for logs and metrics.
func (a Action) String() string {
	switch a {
	case Pass:
		return "pass"
	case Rewrite:
		return "rewrite"
	case Refuse:
		return "refuse"
	case Local:
		return "local"
	}
	return "unknown"
}

// Effect is a change the session must make besides replying.
type Effect uint8

// The effects. Each names what the session does when it applies the
// decision; Decide itself changes nothing.
const (
	NoEffect   Effect = iota
	Quit              // reply, then close; drop the rest of the pipeline
	Reset             // reset the session (RESET)
	Auth              // the session is now authenticated as Decision.User
	SetName           // CLIENT SETNAME: Decision.Arg is the name ("" clears it)
	Hello             // HELLO accepted; Proto is the protocol from now on, User != "" authenticates, SetsName sets Arg as the name
	Multi             // start queueing a transaction (Local +OK; MULTI is sent with the queue)
	Exec              // send MULTI, the queued commands and EXEC as one unit (Action Pass)
	Discard           // drop the queued transaction
	Watch             // pin the session to one upstream connection (Action Pass)
	Unwatch           // release the pin after the reply (Action Pass)
	Subscribe         // enter subscribe mode over a dedicated connection (Action Pass); for a RESP3 client also CLIENT TRACKING
	Blocking          // forward on a dedicated connection (may block) (Action Pass)
	Wire6             // EMQ.VERSION: the session is a wire-6 client (Action Pass)
	AbortMulti        // a queued command was refused: EXEC must answer EXECABORT
	// ScriptExists: SCRIPT EXISTS naming verb shas and other shas (Action
	// Pass). The session forwards it and passes the upstream's reply
	// through PatchScriptExists, which answers 1 for every verb sha.
	ScriptExists
	// ReplyOn, ReplyOff, ReplySkip: CLIENT REPLY ON|OFF|SKIP (Action Local;
	// the Reply is +OK for ON, empty for OFF and SKIP). The session keeps
	// the mode as the server does and drops the replies it silences: OFF
	// every reply until ON, SKIP the next command's (ignored under OFF); ON
	// and RESET end both (RESET's own reply is still dropped after a SKIP).
	// Pushes (messages, subscribe confirmations, invalidations) are never
	// dropped, as on Redis 7.0.15 and Valkey 8.
	ReplyOn
	ReplyOff
	ReplySkip
	// ClientList: CLIENT LIST or CLIENT INFO (Action Local). Reply is the
	// answer of a server whose only client is this session; the session
	// answers instead with its server's clients that List selects, each
	// line made by AppendClientInfo, in ClientListReply's form.
	ClientList
	// SetLibName, SetLibVer: CLIENT SETINFO LIB-NAME|LIB-VER (Action
	// Local, where the server has the command): Decision.Arg is the value
	// ("" clears it), which CLIENT LIST and INFO show as the server does.
	SetLibName
	SetLibVer
	// ClientUnblock: CLIENT UNBLOCK <id> [TIMEOUT|ERROR] (Action Local,
	// where policy.allow opens it). Reply is the answer of a server whose
	// only client is this session (:0); the session answers for the
	// client Target names among its server's, unblocking it if it is
	// blocked.
	ClientUnblock
	// ClientKill: CLIENT KILL with ID and SKIPME filters only (Action
	// Local, where policy.allow opens it). Reply is :0; the session closes
	// the client Target names (every client but itself for ID 0, or but
	// none under SKIPME no) among its server's, and answers how many.
	ClientKill
	// Tracking: CLIENT TRACKING of a RESP2 client (Action Local, Reply
	// nil). The session answers it: it moves the client to connections of
	// its own, turns tracking on there with REDIRECT translated to a
	// connection of the proxy's that relays the invalidations to the
	// session the client named, and answers the server's reply.
	Tracking
	// TrackingGetRedir, TrackingInfo: CLIENT GETREDIR and CLIENT
	// TRACKINGINFO of a RESP2 client (Action Local, Reply nil): the
	// session answers them from its tracking, with the session ids the
	// client knows.
	TrackingGetRedir
	TrackingInfo
)

// String names the effect for logs.
func (e Effect) String() string {
	names := [...]string{"none", "quit", "reset", "auth", "setname", "hello", "multi",
		"exec", "discard", "watch", "unwatch", "subscribe", "blocking", "wire6",
		"abort_multi", "script_exists", "reply_on", "reply_off", "reply_skip", "client_list",
		"set_lib_name", "set_lib_ver", "client_unblock", "client_kill", "tracking",
		"tracking_getredir", "tracking_info"}
	if int(e) < len(names) {
		return names[e]
	}
	return "unknown"
}

// Reason names why a command was refused, for the audit log and metrics.
type Reason string

// The refusal reasons.
const (
	ReasonNone          Reason = ""
	ReasonNoAuth        Reason = "noauth"
	ReasonWrongPass     Reason = "wrongpass"
	ReasonDenied        Reason = "denied"
	ReasonUnknownScript Reason = "unknown_script"
	ReasonShape         Reason = "shape"
	ReasonNumkeys       Reason = "numkeys"
	ReasonVersionKey    Reason = "version_key"
	ReasonSelect        Reason = "select"
	ReasonProtocol      Reason = "protocol"
	ReasonArity         Reason = "arity"
)

// Decision is the outcome for one command.
type Decision struct {
	Action Action
	Effect Effect

	// Head and Replace describe a Rewrite: the first Replace arguments are
	// replaced by the single argument Head (e.g. "EMQ.ENQUEUE" replacing
	// "EVALSHA <sha>", or "EVALSHA_RO" replacing "EVALSHA").
	Head    string
	Replace int

	// Reply is the exact RESP the client gets for Refuse and Local.
	Reply []byte

	// Script is the pinned script an EVAL/EVALSHA/SCRIPT call named, if any.
	Script *shamap.Script
	// SHA is the sha the client named or whose body it sent (lower case).
	SHA string
	// Queue is the hashtag content of the script call's first key, if any.
	Queue []byte
	// Keys are a script call's keys (its arguments after numkeys, as many
	// as numkeys says), nil when the command is not a script call or its
	// numkeys is not one the server accepts. numkeys is parsed once, here:
	// the proxy routes, audits and checks the keys from Keys.
	Keys [][]byte

	Reason Reason
	User   string // for Auth, and Hello with AUTH
	Proto  int    // for Hello: the protocol the session speaks from now on (2 or 3)
	Arg    []byte // for SetName, Hello with SETNAME, SetLibName and SetLibVer (refers into the command's arguments)
	// SetsName is true when Arg is a client name to set (SetName, or Hello
	// with SETNAME); an empty Arg then clears the name.
	SetsName bool
	// List selects the clients of a ClientList decision.
	List *ClientFilter
	// Target is the client of a ClientUnblock or ClientKill decision.
	Target *ClientTarget
}

// ClientTarget is the client CLIENT UNBLOCK or CLIENT KILL acts on.
type ClientTarget struct {
	// ID is the client's id (CLIENT KILL: 0 for every client).
	ID int64
	// Error: CLIENT UNBLOCK ... ERROR (the blocked command fails with
	// -UNBLOCKED), else as if it timed out.
	Error bool
	// SkipMe: CLIENT KILL's SKIPME (yes unless the client said no).
	SkipMe bool
}

// UnknownScripts is the policy for scripts the map does not pin.
type UnknownScripts uint8

// The policies for unknown scripts.
const (
	// RefuseUnknown refuses every script the map does not pin.
	RefuseUnknown UnknownScripts = iota
	// ReadonlyUnknown sends an unknown script as EVALSHA_RO/EVAL_RO, so the
	// server itself aborts any write.
	ReadonlyUnknown
)

// Policy is the configuration Decide reads. It must not be modified while
// sessions use it; build a new one to change it.
type Policy struct {
	Map     *shamap.Map
	Unknown UnknownScripts
	// Deny lists denied commands in upper case, either a command name
	// ("FLUSHALL") or a command and subcommand ("CONFIG SET"). Nil means
	// DefaultDeny; a non-nil map replaces it (an empty map denies nothing).
	Deny map[string]bool
	// Allow lists commands the operator opens, spelt as Deny's entries:
	// an entry lifts a matching deny-list entry ("CONFIG" lifts every
	// CONFIG entry), and the proxy's shared-connection rule reads it for
	// the classes it may open (proxy/plan/rule.go). Nil opens nothing.
	Allow map[string]bool
	// Users maps user name to password; "default" is the AUTH <password>
	// user. Empty means no client authentication.
	Users map[string]string
	// DB is the only database SELECT accepts.
	DB int
	// ServerVersion is the version HELLO reports; "" means
	// DefaultServerVersion.
	ServerVersion string
}

// State is the part of the session's state that decisions depend on.
type State struct {
	Authenticated bool
	User          string
	Wire6         bool // the session sent EMQ.VERSION
	InMulti       bool
	MultiAborted  bool
	Watching      bool // a WATCH is active (the session holds its connection)
	Tracking      bool // a RESP2 client's CLIENT TRACKING is on (on connections of its own)
	Subscribed    bool // subscribed to a channel, pattern or shard channel (a bridged RESP3 client)
	// Fenced is true while the upstream fence holds; GET {emq}:version
	// answers the legacy brand only then.
	Fenced bool
	Name   []byte
	ID     int64
	// Proto is the protocol the client speaks: 2 (or 0) for RESP2, 3 for
	// RESP3 after HELLO 3. Local replies take its form (a nil is `_` in
	// RESP3, HELLO's reply a map, CLIENT INFO a verbatim string).
	Proto int
	// Addr and LocalAddr are the client's and the listener's addresses, as
	// CLIENT INFO shows them (empty when the session does not set them).
	Addr, LocalAddr string
	// NoSub is how the server answers the unsubscribe family outside
	// subscribe mode: nil when it answers one reply per channel (Redis
	// 7.0), else its refusals (Valkey 8's NOSUB).
	NoSub *NoSub
	// SetInfo is true when the server has CLIENT SETINFO (Valkey 8; Redis
	// 7.0 has not, and answers it as an unknown subcommand): the proxy
	// answers it for the session and CLIENT LIST and INFO show lib-name
	// and lib-ver, LibName and LibVer.
	SetInfo         bool
	LibName, LibVer []byte
}
