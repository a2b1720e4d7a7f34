package proxy

import (
	"time"

	"go.uber.org/zap"
)

// The limit against password guessing, per client connection.
//
// The first freeAuthFailures failed AUTH (or HELLO ... AUTH) attempts are
// answered at once, as the server answers them. Each further failure's
// WRONGPASS is delayed: AuthFailDelay, then twice that, and so on, up to
// MaxAuthFailDelay. The MaxAuthFailures-th failure's reply is written and
// the client is closed (counted as client_rejected{reason="auth_failures"}).
// With the defaults a connection makes at most 10 guesses, the last seven
// spread over about 7 seconds. A successful AUTH does not reset the count.
// The delay holds only that client's session; other clients are not
// slowed. Guessing over many connections is bounded by MaxClients and shows
// in the refusals counter (reason "wrongpass").

// Defaults of the limit.
const (
	DefaultAuthFailDelay   = 100 * time.Millisecond
	DefaultMaxAuthFailures = 10
	// MaxAuthFailDelay caps the delay of one reply.
	MaxAuthFailDelay = 2 * time.Second
	// freeAuthFailures are answered without delay (a client with a stale
	// password retrying a few times is not slowed).
	freeAuthFailures = 3
)

// authFailed counts a failed authentication of the session, delays its
// reply past the free failures, and closes the client at the limit.
func (s *session) authFailed() {
	s.authFails++
	if s.authFails >= s.srv.opts.MaxAuthFailures {
		if !s.closing {
			s.srv.met.rejected.WithLabelValues("auth_failures").Inc()
			s.log.Warn("closing a client after failed authentications", zap.Int("failures", s.authFails))
		}
		s.closing = true
		return
	}
	if s.authFails <= freeAuthFailures {
		return
	}
	d := s.srv.opts.AuthFailDelay << min(s.authFails-freeAuthFailures-1, 16)
	d = min(d, MaxAuthFailDelay)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.srv.ctx.Done():
	}
}
