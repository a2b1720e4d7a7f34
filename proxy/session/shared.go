package session

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Config is what a session is bounded by: the proxy's Options a session
// reads (package proxy says what each means and gives the defaults).
type Config struct {
	MaxMultibulk     int
	MaxBulk          int64
	MaxInline        int
	MaxQueryBuffer   int64
	MaxPipeline      int
	MaxReplyBytes    int64
	ShareCommands    int
	ShareBytes       int64
	IsolateFor       time.Duration
	MaxQueuedMulti   int
	IdleTimeout      time.Duration
	WriteTimeout     time.Duration
	AuthFailDelay    time.Duration
	MaxAuthFailDelay time.Duration
	MaxAuthFailures  int
	AuthTimeout      time.Duration
	AuditPassthrough bool
}

// Hooks are calls a session makes into tests around its sends; nil: none.
// They come with the server's options and do not change while sessions
// run.
type Hooks struct {
	// BeforeSend runs before a segment is sent, told whether the session
	// admitted commands under the control table this round.
	BeforeSend func(admitted bool)
	// AfterSendCheck runs between a part's send-time check and its first
	// write, when the session admitted commands this round: a pause there
	// is what the node-side fence covers (docs/queue-move.md, "Late
	// writers").
	AfterSendCheck func()
	// BeforeResend runs before a part is resent on a new connection,
	// before the send-time check.
	BeforeResend func()
}

// Control is the control loop of moved queues, as a session sees it: the
// state in force and the leases (plan.Control), how long a held command
// may wait, and the count of those waiting.
type Control interface {
	plan.Control
	// LeaseLapsed reports whether the proxy held a lease on u and it
	// lapsed by now.
	LeaseLapsed(u *upstream.Upstream, now time.Time) bool
	// HoldLimits returns the longest a command waits for its queue and
	// the loop's period.
	HoldLimits() (hold, poll time.Duration)
	// Holding counts one command waiting for its queue; done ends it.
	Holding() (done func())
}

// Shared is what every session of a server shares. The server fills it
// before its first session; the pointers are the server's own values,
// which it changes (routes, policy, the capture) while sessions run.
type Shared struct {
	Cfg        Config
	Log        *zap.Logger // the operational log
	Audit      *zap.Logger // the audit log; nil: off
	Met        *observe.Metrics
	MetLatency bool // observe emqproxy_batch_seconds
	Mem        *limits.Budget
	Fails      *limits.AuthTable
	Keys       *cmdtable.Store
	Cap        *observe.Capture
	Redir      *pubsub.Redirects
	Ups        []*upstream.Upstream // every upstream, in the configuration's order
	Routes     *atomic.Pointer[plan.Router]
	Policy     *atomic.Pointer[rewrite.Policy]
	Ctl        Control // nil without the control table
	Acking     bool    // some upstream waits for replicas (upstream/ack.go)
	Ctx        context.Context
	Closing    *atomic.Bool // the server is shutting down
	Sessions   Registry
	Hooks      Hooks // for tests
	// Transport gives the sessions their upstream connections, of every
	// kind (upstream.Kind); nil: upstream.Direct, the upstreams' own.
	Transport upstream.Transport
}

// conn asks the server's Transport for a connection to u.
func (s *session) conn(u *upstream.Upstream, r upstream.Request) (upstream.Conn, error) {
	return upstream.Via(s.srv.Transport).Conn(s.srv.Ctx, u, r)
}

// pipeOf asks the server's Transport for a shared connection of kind k
// to u (KindShared, KindReplaced, KindAwaitShared): nil when none comes.
func (s *session) pipeOf(u *upstream.Upstream, k upstream.Kind, proto int, old *pipe.Pipe) *pipe.Pipe {
	c, _ := s.conn(u, upstream.Request{Kind: k, ID: s.id, Proto: proto, Old: old})
	return c.P
}

// fenced reports whether every upstream's fence holds.
func (srv *Shared) fenced() bool {
	for _, u := range srv.Ups {
		if !u.Fenced() {
			return false
		}
	}
	return true
}

// Session is one client connection's session.
type Session = session

// New prepares the session of an accepted connection; Serve runs it.
func New(srv *Shared, id uint64, nc net.Conn) *Session { return newSession(srv, id, nc) }

// Serve runs the session until the client goes, a limit closes it, or the
// server shuts down.
func (s *Session) Serve() { s.serve() }

// Wake makes a session waiting for its client's input look again (the
// server is shutting down).
func (s *Session) Wake() { _ = s.c.Net().SetReadDeadline(time.Now()) }

// Close closes the client's connection: its session ends.
func (s *Session) Close() { _ = s.c.Net().Close() }

// ErrServerClosed ends a session when its server shuts down (package
// proxy's Serve returns it too).
var ErrServerClosed = errors.New("proxy: server closed")
