package session

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/proxy/clients"
	"github.com/emqproxy/emqproxy/proxy/conn"
	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/proxy/observe"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/pubsub"
	"github.com/emqproxy/emqproxy/proxy/segment"
	"github.com/emqproxy/emqproxy/proxy/tracking"
	"github.com/emqproxy/emqproxy/proxy/txn"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// errClose ends a session after its pending replies are written.
var errClose = errors.New("close")

// session serves one client connection. Its goroutine is the only place
// that knows about order: it reads a batch, plans each command, forwards
// the forwarded ones as one batch per upstream connection, and writes every
// reply in command order in one write.
type session struct {
	srv  *Shared
	id   uint64
	c    *conn.Conn // the client's bytes, both ways (package conn)
	addr string
	log  *zap.Logger

	st rewrite.State
	v  plan.View // what the current round decides under (plan.go, package plan)

	// The rest is grouped by the file that owns it; each group's fields
	// are promoted (s.seg is s.roundState.seg) and changed by its
	// owner's methods, read by others.
	roundState                   // the round's segment and what it notes of the round (segment.go)
	ownConns                     // the client's own upstream connections (forward.go)
	authState                    // the unauthenticated deadline and failed AUTHs (authlimit.go)
	tx         txn.Tx            // a MULTI being queued (transaction.go, package txn)
	sub        *pubsub.Mode      // subscribe mode, set by startSubscribe (subscribe.go)
	rm         rewrite.ReplyMode // CLIENT REPLY (package rewrite)
	listing    clients.View      // what CLIENT LIST shows of the session (clients.go)
	obs        observe.Session   // the round's audit records, its side of a capture (observe.go)
	sh         share             // its share of the shared connections (share.go)
	adm        admission         // commands admitted under the control table (hold.go)
	trk        *tracking.Tracker // RESP2 client-side caching (tracking.go)

	cmd    command   // the command being served (command.go)
	inSeg  inSegment // its carrier in normal service (segment.go)
	bridge onBridge  // its carrier on the RESP3 bridge (bridge.go)
}

// newSession prepares a session for an accepted connection.
func newSession(srv *Shared, id uint64, nc net.Conn) *session {
	addr, laddr := netaddr.Peer(nc) // a Unix socket's: its path and ":0"
	s := &session{
		srv:  srv,
		id:   id,
		addr: addr,
		c: conn.New(nc, conn.Options{ID: id, Mem: srv.Mem, MaxQueryBuffer: srv.Cfg.MaxQueryBuffer,
			Limits:       resp.Limits{MaxMultibulk: srv.Cfg.MaxMultibulk, MaxBulk: int(srv.Cfg.MaxBulk), MaxInline: srv.Cfg.MaxInline},
			WriteTimeout: srv.Cfg.WriteTimeout, BytesIn: srv.Met.BytesIn, BytesOut: srv.Met.BytesOut}),
		roundState: roundState{seg: segment.Segment{Mem: srv.Mem, Simple: true}},
		sh:         share{Share: limits.Share{Commands: srv.Cfg.ShareCommands, Bytes: srv.Cfg.ShareBytes}},
		tx:         txn.Tx{Mem: srv.Mem, MaxQueued: srv.Cfg.MaxQueuedMulti, MaxBytes: srv.Cfg.MaxReplyBytes, Acking: srv.Acking},
	}
	s.inSeg, s.bridge = inSegment{s}, onBridge{s: s}
	s.log = srv.Log.With(zap.Uint64("conn", id), zap.String("client", s.addr))
	s.obs = s.newObserver() // observe.go
	s.listing.Init(s.addr, nc, time.Now())
	s.st = rewrite.State{ID: int64(s.id), Addr: s.addr, LocalAddr: laddr}
	s.authBy = time.Now().Add(srv.Cfg.AuthTimeout) // while users are configured (authlimit.go)
	return s
}

// serve runs the session until the client goes, a limit closes it, or the
// server shuts down. It is the session's one loop, in every mode: a round
// frames and serves the complete commands in the buffer, then the session
// reads more; a round that enters or leaves subscribe mode is followed by
// one in the other mode at once (its commands may be buffered already).
func (s *session) serve() {
	defer s.cleanup()
	for {
		subscribed := s.sub != nil
		var n int
		var err error
		if subscribed {
			err = s.subRound() // subscribe.go
		} else {
			n, err = s.round()
		}
		if err != nil {
			return
		}
		if (s.sub != nil) != subscribed || n == s.srv.Cfg.MaxPipeline {
			continue // the other mode's commands, or more, may be complete already
		}
		if err := s.fill(); err != nil {
			return
		}
	}
}

// fill reads more client bytes, making room first; in subscribe mode it
// waits for the subscriber's events too (subscribe.go's subFill).
func (s *session) fill() error {
	if s.sub != nil {
		return s.subFill()
	}
	if err := s.room(); err != nil { // budget.go
		return err
	}
	dl := s.readDeadline() // authlimit.go
	if s.srv.Closing.Load() {
		return ErrServerClosed
	}
	err := s.c.Fill(dl)
	if errors.Is(err, os.ErrDeadlineExceeded) && s.authPending() && !time.Now().Before(s.authBy) {
		s.authTimedOut()
	}
	return err
}

// cleanup closes the client and its dedicated upstream connections.
func (s *session) cleanup() {
	if s.sub != nil {
		s.endSub(true) // subscribe.go
	}
	_ = s.c.Net().Close()
	defer s.releaseMemory()
	s.closePinned()
	s.endShare() // share.go
	if s.blocker != nil {
		s.blocker.Close()
		s.blocker = nil
	}
	s.trackEnd() // tracking.go
	s.obs.End()  // proxy/observe: the capture's stream
}

// round frames and serves the complete commands in the buffer (at most
// MaxPipeline) and writes their replies. It returns how many it served.
func (s *session) round() (served int, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.srv.Met.Panics.Inc()
			s.log.Error("panic serving a client; closing it", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			served, err = 0, fmt.Errorf("panic: %v", r)
		}
		if len(s.adm.states) > 0 {
			s.release() // hold.go: the round's replies are in
		}
	}()
	s.loadView()   // plan.go: once per read
	s.shareRound() // share.go: an isolated client may come back
	s.c.Reset()
	s.began = time.Time{}
	s.kind = observe.BatchLocal
	// Past the reply cap (a part of the batch was answered over it,
	// share.go) the rest of the batch is not sent: the client is closed.
	for served < s.srv.Cfg.MaxPipeline && !s.closing && !s.over && s.sub == nil {
		s.c.SetUnauthenticated(len(s.v.Pol.Users) > 0 && !s.st.Authenticated)
		f, status, errReply := s.c.Next()
		switch status {
		case resp.Invalid:
			s.seg.AddLocal(errReply, -1, s.rm.Command(rewrite.NoEffect))
			s.closing = true
			s.srv.Met.Rejected.WithLabelValues("protocol").Inc()
			continue
		case resp.Framed:
			if served == 0 {
				s.began = time.Now()
			}
			served++
			_ = s.serveCommand(f, &s.inSeg) // command.go; the segment's carrier never fails
			continue
		}
		break // incomplete: the rest comes with the next read
	}
	if served == 0 && !s.closing {
		return 0, nil
	}
	s.trackCachingEnd() // tracking.go
	s.flush()
	if len(s.adm.states) > 0 {
		// hold.go: the round's replies are in. Uncounted before they are
		// written to the client: a client that does not read its replies
		// holds no command in flight, so it never delays the control loop's
		// acknowledgement of a new table.
		s.release()
	}
	s.publish(s.began) // before the replies: a client that has them is listed as of them
	err = s.write()
	s.logAudits()
	if s.srv.MetLatency && !s.began.IsZero() {
		s.srv.Met.Latency[s.kind].Observe(time.Since(s.began).Seconds())
	}
	if err == nil && s.closing {
		err = errClose
	}
	return served, err
}

// write sends the batch's replies to the client in one write.
func (s *session) write() error {
	defer s.releaseOutput()
	if s.silent {
		return errClose
	}
	if s.over {
		s.srv.Met.Rejected.WithLabelValues("reply_bytes").Inc()
		s.log.Warn("closing client over the reply bytes limit", zap.Int64("limit", s.srv.Cfg.MaxReplyBytes))
		return errClose
	}
	if len(s.c.Out) == 0 {
		return nil
	}
	took, err := s.c.Write() // package conn: under the write deadline
	s.shareWrite(took)       // share.go: a slow reader
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.srv.Met.Rejected.WithLabelValues("write").Inc()
		}
		return err
	}
	return nil
}
