package plan

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/clienterr"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// View is what a round decides under: loaded once at its start by the
// caller (the control state before the routes: the control loop stores the
// routes first), and again only when Decide says the control state changed
// while it admitted the command (Step.Stale).
type View struct {
	Pol    *rewrite.Policy
	Routes *Router
	// Ctl is the control table's state; nil when the table is off.
	Ctl *ControlState
	// Loop is the control loop, asked about leases and the state in force
	// when Ctl is set.
	Loop Control
	// Tables are the servers' command tables (the rule, the queue-time
	// checks, the keys).
	Tables *cmdtable.Store
}

// Auth counts a failed authentication against the connection and its
// address and returns the delay its reply waits (the caller waits it).
type Auth interface {
	AuthFailed() time.Duration
}

// Binding is what the session is bound to when the command is decided.
type Binding struct {
	// Pin is the upstream of the connection WATCH pinned, nil without one.
	Pin *upstream.Upstream
	// Leg is the upstream of a bridged RESP3 client's WATCH leg, nil
	// without one.
	Leg *upstream.Upstream
	// Tx is the route of the session's transaction (what it queued); never
	// nil.
	Tx *TxRoute
}

// Input is what Decide is given, besides the step's own inputs.
type Input struct {
	Args  [][]byte
	State *rewrite.State // the session's protocol state: rewrite.Decide updates it
	View  *View
	Bind  Binding
	Auth  Auth
	Bufs  *Bufs
}

// Bufs are backing arrays a command's values borrow, kept on the session so
// a command allocates none: its keys (Step.CmdKeys), their positions in its
// arguments, their queues (Step.Queues) and the queues it is admitted by.
// Nothing in them is read after the command.
type Bufs struct {
	keys   [][]byte
	keyPos []int
	qs     [][]byte
	admit  [][]byte
}

// Step is what Decide makes of one command.
type Step struct {
	Decision rewrite.Decision
	// Up is where a forwarded command goes; nil when nothing is forwarded.
	Up *upstream.Upstream
	// Wait: a queue of the command may not be sent under the view's
	// control state: held, or routed to a node whose lease lapsed. The
	// caller waits for a new state and decides again (WaitedOut once the
	// wait is over: then the step refuses what it would wait for, naming
	// the queue and the node).
	Wait bool
	// AuthWait is the delay a failed authentication earned, waited by the
	// caller before the reply.
	AuthWait time.Duration
	// Exec: the command is the EXEC of the session's transaction.
	Exec bool
	// NeedKeys: the command's keys need COMMAND GETKEYS; the caller asks
	// and decides again with them in Keys (Asked set).
	NeedKeys bool
	// Stale: the control state changed while the command was being
	// admitted; nothing was counted. The caller loads the state and the
	// routes again and decides again.
	Stale bool
	// Admitted is the control state the command was admitted under,
	// counted in flight there: the caller releases it (ControlState.Release)
	// once the command's reply is in. nil when nothing was counted.
	Admitted *ControlState
	// Slots are the slots of the admitted command's queues, counted with
	// it (admit.go).
	Slots Slots

	// CmdKeys are the command's keys, found once: what routing, admission
	// and a transaction's route read; Keyed says the command routes by its
	// keys (or is a script call). CmdKeys lends its backing array from the
	// session (Bufs): valid until the next command.
	CmdKeys [][]byte
	Keyed   bool
	// Queues are the queues of CmdKeys, one per key, found with them
	// (rewrite.Hashtag of each key; nil for a key without one): what
	// routing, admission and a transaction's route read, so a command's
	// queue is worked out once. Lent from the session's Bufs as CmdKeys is.
	Queues [][]byte
	// Entry is the command's entry in the server's command table, looked
	// up once (by the rule); Script: it is a script call (EVAL and
	// EVALSHA, _RO or not), whose keys are the decision's (Decision.Keys).
	Entry  *cmdtable.Entry
	Script bool

	// Inputs, kept when the step is decided again: the keys the server
	// gave (Asked: Keys holds them), whether the client may be pushed to
	// (a bridged RESP3 client that is subscribed or tracks), and whether
	// the command waited for its queue as long as a command may (WaitedOut:
	// a queue that still may not be sent refuses it with TRYAGAIN, where
	// it would ask for a wait).
	Keys      [][]byte
	Asked     bool
	Pushes    bool
	WaitedOut bool
}

// Forwards reports whether the step sends the command to an upstream.
func (sp *Step) Forwards() bool {
	return sp.Decision.Action == rewrite.Pass || sp.Decision.Action == rewrite.Rewrite
}

// replyBridgedHello refuses a protocol switch on a bridged connection that
// is subscribed or tracks (a RESP2 connection cannot carry pushes between
// replies).
var replyBridgedHello = clienterr.Reply(clienterr.New(clienterr.Proxy,
	"a subscribed or tracking RESP3 client cannot switch protocol; unsubscribe and turn tracking off, or RESET, first"))

// Decide decides one command (see the package's doc) into sp, keeping sp's
// inputs (Keys, Asked, Pushes, WaitedOut).
func Decide(in *Input, sp *Step) {
	st, v := in.State, in.View
	args := in.Args
	*sp = Step{Decision: rewrite.Decide(args, st, v.Pol), Keys: sp.Keys, Asked: sp.Asked, Pushes: sp.Pushes, WaitedOut: sp.WaitedOut}
	d := &sp.Decision
	if sp.Pushes && d.Effect == rewrite.Hello && d.Action == rewrite.Local && d.Proto == 2 {
		// A RESP2 connection cannot carry pushes between replies.
		*d = rewrite.Decision{Action: rewrite.Refuse, Reason: rewrite.ReasonProtocol, Reply: replyBridgedHello}
	}
	sp.Exec = d.Effect == rewrite.Exec && st.InMulti
	if d.Reason == rewrite.ReasonWrongPass {
		sp.AuthWait = in.Auth.AuthFailed()
	}
	if d.Reason == rewrite.ReasonNoAuth && d.Effect == rewrite.NoEffect {
		// The server rejects an unknown command or a wrong number of
		// arguments before it asks for authentication (queuecheck.go).
		if reply, reason := commandError(v.Tables, args); reply != nil {
			*d = rewrite.Decision{Action: rewrite.Refuse, Reason: reason, Reply: reply}
		}
	}
	if st.InMulti {
		queueCheck(v.Tables, args, d) // queuecheck.go: the server's queue-time errors
	}
	sp.Entry = Rule(args, d, st.InMulti, v) // rule.go: the shared-connection rule
	if !sp.Forwards() {
		return
	}
	sp.Script = isScriptCall(args)
	if !findKeys(in, sp) {
		sp.NeedKeys = true // the caller asks the server
		return
	}
	sp.Up = routeDecision(in, sp) // route.go
	if sp.Up == nil || v.Ctl == nil {
		return
	}
	admit(in, sp) // admit.go
}

// findKeys finds the keys of a command Decide forwards, once, in
// sp.CmdKeys, and their queues in sp.Queues: what routing, admission and a
// transaction's route read. Nothing is looked at when every route leads to
// one upstream and the control table is off (no key needs looking at); a
// command whose keys only COMMAND GETKEYS can tell takes them from sp when
// there are routes to choose from, and false says they were not asked yet.
func findKeys(in *Input, sp *Step) bool {
	v, bufs := in.View, in.Bufs
	if v.Routes.single && v.Ctl == nil {
		return true
	}
	qs := bufs.qs[:0]
	if sp.Script {
		// Decide's keys, in the arguments: nothing to copy; the first
		// one's queue is the decision's.
		sp.CmdKeys = sp.Decision.Keys
		for i, k := range sp.CmdKeys {
			q := sp.Decision.Queue
			if i > 0 {
				q = rewrite.Hashtag(k)
			}
			qs = append(qs, q)
		}
		bufs.qs, sp.Queues = qs, qs
		return true
	}
	keys := bufs.keys[:0]
	ck := sp.Entry
	switch {
	case ck == nil:
	case ck.Ask:
		if !v.Routes.single {
			if !sp.Asked {
				return false
			}
			keys = append(keys, sp.Keys...)
		}
	default:
		bufs.keyPos = ck.Positions(in.Args, bufs.keyPos[:0])
		for _, i := range bufs.keyPos {
			keys = append(keys, in.Args[i])
		}
	}
	for _, k := range keys {
		qs = append(qs, rewrite.Hashtag(k))
	}
	bufs.keys, sp.CmdKeys = keys, keys
	bufs.qs, sp.Queues = qs, qs
	return true
}

// admitted returns the queues a command is admitted by: those of its keys
// that name one (sp.Queues without the nils), in bufs.admit.
func (bufs *Bufs) admitted(sp *Step) [][]byte {
	qs := bufs.admit[:0]
	for _, q := range sp.Queues {
		if q != nil {
			qs = append(qs, q)
		}
	}
	bufs.admit = qs
	return qs
}

// Queueable reports whether a command decided inside MULTI is queued.
func Queueable(d *rewrite.Decision) bool {
	switch d.Effect {
	case rewrite.Exec, rewrite.Discard, rewrite.Multi, rewrite.Quit, rewrite.Reset:
		return false
	}
	return d.Action == rewrite.Pass || d.Action == rewrite.Rewrite || d.Effect == rewrite.AbortMulti
}

// IsWrite reports whether a forwarded command writes, for the replicas'
// confirmation (upstream/ack.go): a verb call (a write on either
// executor), a script call that is not _RO, a command the server's table
// flags as a write.
func (sp *Step) IsWrite(args [][]byte) bool {
	d := &sp.Decision
	if sp.Script {
		if d.Script != nil {
			return d.Script.Verb != ""
		}
		ro := rewrite.ScriptKindOf(args[0]).ReadOnly() || d.Head == "EVALSHA_RO" || d.Head == "EVAL_RO"
		return !ro
	}
	return sp.Entry != nil && sp.Entry.Traits&cmdtable.TraitWrite != 0
}
