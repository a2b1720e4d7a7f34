package session

import (
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/limits"
)

// authState is a session's authentication deadline and failures.
type authState struct {
	authBy    time.Time // close the client unless it authenticates by then
	authFails int       // failed AUTHs on this connection
}

// The limits against password guessing: failed AUTHs (and HELLO ...
// AUTH) are counted per source address, across connections, in package
// limits' AuthTable, which says how long each failure's reply waits.
//
// The delay holds only the failing client's session (its reply waits; its
// goroutine sleeps): other clients and the proxy are not slowed.
//
// Per connection, the MaxAuthFailures-th failure's reply is written (after
// its delay) and the client is closed (client_rejected{reason=
// "auth_failures"}). And
// while the policy has users, a connection that has not authenticated
// AuthTimeout after it connected is closed (reason "auth_timeout"),
// without a reply to a guess still waiting out its delay: a guess is never
// answered sooner than its delay.
//
// Metrics: emqproxy_auth_fail_delay_seconds_total (the delay applied to
// failed authentications), emqproxy_auth_fail_addresses (addresses in the
// table).

// AuthFailed counts a failed authentication of the session and closes the
// client at the per-connection limit (after its reply); it returns the
// delay the reply waits, as its address's count says (authDelay). The plan
// calls it (plan.Auth) when it decides a wrong password.
func (s *session) AuthFailed() time.Duration {
	s.authFails++
	wait := s.srv.Fails.Failed(limits.SourceHost(s.addr), time.Now(), s.srv.Cfg.AuthFailDelay, s.srv.Cfg.MaxAuthFailDelay)
	if s.authFails >= s.srv.Cfg.MaxAuthFailures {
		if !s.closing {
			s.srv.Met.Rejected.WithLabelValues("auth_failures").Inc()
			s.log.Warn("closing a client after failed authentications", zap.Int("failures", s.authFails))
		}
		s.closing = true // after its reply, delayed as every other
	}
	return wait
}

// authDelay waits the delay of a failed authentication before its reply;
// past the authentication deadline the client is closed without one.
func (s *session) authDelay(wait time.Duration) {
	now := time.Now()
	cut := false
	if s.authPending() {
		if left := s.authBy.Sub(now); left < wait {
			wait, cut = max(left, 0), true
		}
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.srv.Ctx.Done():
	}
	s.srv.Fails.Delays.Add(time.Since(now).Seconds())
	if cut {
		s.authTimedOut()
		s.silent = true // the guess is not answered before its delay
	}
}

// readDeadline returns the client's read deadline for a read (the zero
// time: the one set before stays): IdleTimeout from now, and the
// authentication deadline while the client has yet to authenticate.
func (s *session) readDeadline() time.Time {
	var dl time.Time
	if s.srv.Cfg.IdleTimeout > 0 {
		dl = time.Now().Add(s.srv.Cfg.IdleTimeout)
	}
	switch {
	case s.authBy.IsZero():
	case s.st.Authenticated:
		s.authBy = time.Time{}
		if dl.IsZero() {
			_ = s.c.Net().SetReadDeadline(time.Time{}) // the authentication deadline set before
		}
	case len(s.srv.Policy.Load().Users) == 0:
		// No authentication required (now): no deadline. Users set
		// by a reload make a connection that has not authenticated
		// within AuthTimeout of connecting go at its next read.
	case dl.IsZero() || s.authBy.Before(dl):
		dl = s.authBy
	}
	return dl
}

// authPending reports whether the client must still authenticate by
// s.authBy.
func (s *session) authPending() bool {
	return !s.authBy.IsZero() && !s.st.Authenticated && len(s.srv.Policy.Load().Users) > 0
}

// authTimedOut closes a client that did not authenticate in time.
func (s *session) authTimedOut() {
	if !s.closing {
		s.srv.Met.Rejected.WithLabelValues("auth_timeout").Inc()
		s.log.Info("closing a client that did not authenticate in time", zap.Duration("timeout", s.srv.Cfg.AuthTimeout))
	}
	s.closing = true
}
