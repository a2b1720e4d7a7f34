package proxy

import (
	"github.com/emqproxy/emqproxy/rewrite"
)

// The unsubscribe family outside subscribe mode is answered as the
// upstream found its server answers it (upstream/unsub.go).

// noSub is rewrite.State.NoSub for a session: the keyless commands'
// upstream's (the default route).
func (s *Server) noSub() *rewrite.NoSub { return s.routes.Load().Default().NoSub() }
