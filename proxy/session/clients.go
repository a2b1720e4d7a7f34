package session

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/clients"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The session's side of CLIENT LIST, CLIENT INFO, CLIENT KILL and CLIENT
// UNBLOCK: package clients answers them across the server's Registry; the
// session is its clients.Client and keeps its View (s.listing) up to date.

// Registry is the server's sessions (clients.Registry): CLIENT LIST shows
// them, CLIENT KILL and a tracking client's REDIRECT find them by id.
type Registry = clients.Registry[*Session]

// ID is the session's id (clients.Client).
func (s *Session) ID() uint64 { return s.id }

// View is what CLIENT LIST shows of the session (clients.Client).
func (s *Session) View() *clients.View { return &s.listing }

// publish writes the session's view as of at (the zero time: as of its
// last batch).
func (s *session) publish(at time.Time) {
	multi := -1
	if s.st.InMulti {
		multi = s.tx.N
	}
	qbuf, qfree := s.c.Buffered()
	s.listing.Publish(at, clients.Fields{
		Name: s.st.Name, Lib: [2][]byte{s.st.LibName, s.st.LibVer}, User: s.st.User, Proto: s.proto(),
		Multi: multi, QBuf: qbuf, QBufFree: qfree,
	})
}

// clientList answers CLIENT LIST or CLIENT INFO (f) for the session.
func (s *session) clientList(f *rewrite.ClientFilter) []byte {
	s.publish(time.Time{})
	return s.srv.Sessions.List(s, f, s.srv.Keys, s.v.Pol.DB, s.proto())
}

// clientUnblock answers CLIENT UNBLOCK (clients.Registry.Unblock).
func (s *session) clientUnblock(t *rewrite.ClientTarget) []byte {
	return s.srv.Sessions.Unblock(s, t, s.srv.Transport)
}

// clientKill answers CLIENT KILL ID (clients.Registry.Kill); the session
// closes after the reply when it is named too.
func (s *session) clientKill(t *rewrite.ClientTarget) []byte {
	reply, self := s.srv.Sessions.Kill(s, t)
	if self {
		s.closing = true
	}
	return reply
}
