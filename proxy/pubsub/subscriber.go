package pubsub

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/resp"
)

// Metrics is what the subscribers count into (the proxy's metrics
// implement it).
type Metrics interface {
	// UpstreamError counts an upstream connection that failed (kind
	// "lost").
	UpstreamError(upstream, kind string)
	// Reject counts a client closed for reason.
	Reject(reason string)
}

// ReasonMemoryBudget is the refusals' reason for a transaction's command
// or a reply refused for the memory budget, and client_rejected's for a
// client closed for it.
const ReasonMemoryBudget = "memory_budget"

// Client is what a Subscriber needs of its client's session.
type Client struct {
	Conn         net.Conn // the client's connection
	Log          *zap.Logger
	Mem          *limits.Budget // the process-wide memory budget
	Met          Metrics
	WriteTimeout time.Duration // of a write to the client
	Subs         *Counts       // the client's subscriptions, for CLIENT LIST (kept by the relay)
}

// ErrClose ends the session once the client was told what it gets: the
// relay ended on its own (Failure, LegFailure).
var ErrClose = errors.New("close")

// Reasons the relay ends.
var (
	errSubscriberBytes  = errors.New("subscriber over the reply bytes limit")
	errSubscriberGone   = errors.New("subscriber gone")
	errSubscriberBudget = errors.New("subscriber over the memory budget")
)

// Subscriber is a client's connection of its own that carries pushes (see
// the package's doc): its upstream connection, the relay goroutine that
// frames the server's output and the writer goroutine that sends it to the
// client. The exported fields are the session goroutine's.
type Subscriber struct {
	c     *Client
	U     *upstream.Upstream
	nc    net.Conn // the upstream connection
	rr    resp.Reader
	First []byte       // the command that entered subscribe mode (a bridge's: named first)
	max   int          // cap on the bytes waiting for the client
	acct  resp.Account // what the relay's chunk holds of the memory budget (the relay's)
	RESP3 bool         // a RESP3 client: bridged
	// Tracking: the client turned CLIENT TRACKING on, with TrackRaw the
	// command as it sent it, for the legs opened after.
	Tracking bool
	TrackRaw []byte
	// The bridge's legs: w is the subscriber whose writer every leg's
	// relay hands to (itself for the bridge's first connection); legs the
	// connections to other upstreams; Cur the leg the commands being
	// gathered go to; LegDown a leg's relay ended; WatchUp the upstream a
	// WATCH went to, until EXEC, DISCARD or UNWATCH; setname names a leg's
	// connection with the barrier's nonce.
	w       *Subscriber
	legs    map[*upstream.Upstream]*Subscriber
	Cur     *Subscriber
	LegDown chan struct{}
	WatchUp *upstream.Upstream
	setname []byte
	Caching []byte       // a CLIENT CACHING kept for the next command's leg
	swapN   atomic.Int32 // len(swaps), read by the relay without the lock
	swaps   []Tap        // what the relay does with the next replies (not pushes), in order (under mu)
	// Muted: the relay drops the replies (not the pushes) while the
	// client's CLIENT REPLY mode silences them; changed only after a
	// barrier. SkipFirst: a SKIP silences the command that entered
	// subscribe mode, and only that one.
	Muted     atomic.Bool
	SkipFirst bool

	pongSub   []byte // the barrier's reply while subscribed
	pongPlain []byte // the barrier's reply once not subscribed
	ping      []byte // the barrier command

	barrierOut atomic.Bool   // a barrier is in flight
	stopAfter  atomic.Bool   // the relay stops after the barrier's reply
	barrier    chan bool     // the barrier's outcome: still subscribed
	Hint       chan struct{} // the client may have left subscribe mode: check
	Ended      chan struct{} // closed when the relay stops
	err        error         // why the relay stopped (nil: after a barrier); read after Ended

	mu      sync.Mutex
	pending []byte // replies waiting for the client
	spare   []byte
	finish  bool // the writer stops once pending is empty
	wake    chan struct{}
	wrote   chan struct{} // closed when the writer stops
	werr    error         // the writer's error; read after wrote

	pendHeld int64 // what pending holds of the memory budget (under mu)
}

// New makes the Subscriber of a client entering subscribe mode, or the
// RESP3 bridge, on the upstream connection dl of u (owned: upstream.Own).
// first is the command that entered, maxBytes the cap on the bytes waiting
// for the client. Start runs it.
func New(c *Client, u *upstream.Upstream, dl upstream.Dialed, first []byte, maxBytes int, resp3 bool) *Subscriber {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	tag := "emqproxy-barrier-" + hex.EncodeToString(nonce[:])
	sub := &Subscriber{
		c:       c,
		U:       u,
		nc:      dl.Conn,
		First:   append([]byte(nil), first...),
		max:     maxBytes,
		RESP3:   resp3,
		barrier: make(chan bool, 1),
		Hint:    make(chan struct{}, 1),
		Ended:   make(chan struct{}),
		wake:    make(chan struct{}, 1),
		wrote:   make(chan struct{}),
		LegDown: make(chan struct{}, 1),
	}
	sub.w, sub.Cur = sub, sub
	sub.acct.Budget = c.Mem
	sub.rr = resp.NewReader(dl.Buf)
	sub.rr.Acct = &sub.acct
	sub.pongSub = []byte("*2\r\n$4\r\npong\r\n$" + strconv.Itoa(len(tag)) + "\r\n" + tag + "\r\n")
	sub.pongPlain = []byte("$" + strconv.Itoa(len(tag)) + "\r\n" + tag + "\r\n")
	sub.ping = []byte("*2\r\n$4\r\nPING\r\n$" + strconv.Itoa(len(tag)) + "\r\n" + tag + "\r\n")
	if resp3 {
		// The barrier of a bridged RESP3 client is CLIENT GETNAME on its
		// connection, named with the nonce first (its +OK dropped): unlike
		// PING, a CLIENT command leaves a CLIENT CACHING YES in force for
		// the client's next command, and the connection is the client's
		// own (its CLIENT SETNAME is answered by the proxy).
		setname := "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$" + strconv.Itoa(len(tag)) + "\r\n" + tag + "\r\n"
		sub.setname = []byte(setname)
		sub.First = append([]byte(setname), sub.First...)
		sub.Swap(nil)
		sub.ping = []byte("*2\r\n$6\r\nCLIENT\r\n$7\r\nGETNAME\r\n")
		sub.pongSub = sub.pongPlain
	}
	return sub
}

// Start runs the relay and the writer.
func (sub *Subscriber) Start() {
	go sub.relay()
	go sub.write()
}

// Abandon gives back the connection of a Subscriber never started.
func (sub *Subscriber) Abandon() { sub.U.Disown(sub.nc) }

// SubKind classifies a command in subscribe mode.
type SubKind uint8

const (
	SubOther   SubKind = iota // refused by the server after a barrier, or back to normal service
	SubForward                // (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING: to the server
	SubQuit                   // QUIT
	SubReset                  // RESET
)

// KindOf classifies a command name (any case).
func KindOf(name []byte) SubKind {
	if len(name) > len("PUNSUBSCRIBE") {
		return SubOther
	}
	var buf [16]byte
	up := buf[:0]
	for _, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = append(up, c)
	}
	switch string(up) {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE", "PING":
		return SubForward
	case "QUIT":
		return SubQuit
	case "RESET":
		return SubReset
	}
	return SubOther
}
