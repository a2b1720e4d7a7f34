package proxy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/upstream"
	"go.uber.org/zap"
)

// Routing by queue.
//
// A server has a fixed set of named upstreams, each with a Role, and an
// ordered list of routes: queue globs (path.Match syntax over the queue,
// the hashtag content of keys such as emq:{<queue>}:pending) to an
// upstream name. The first route with a matching glob wins; the last must
// match every queue ("*") and is the default route.
//
// Every forwarded command is routed by its keys (package plan's route.go): a key
// with a hashtag goes where its queue's route says, a key without one (and
// a command without keys) goes to the default route. The key positions are
// the server's own (COMMAND's key specs, package cmdtable). A command, or a
// MULTI/EXEC, whose keys route to two upstreams is refused with CROSSROUTE
// before anything is sent; a pipeline that spans upstreams is split into one
// batch per upstream, sent concurrently, and the replies are put back in
// the client's order (package segment).
//
// On a module upstream a verb script call is rewritten to EMQ.<TOKEN> (the
// decision rewrite.Decide made); on a scripts upstream the plan turns
// that rewrite back into a pass, so the call leaves as the client's own
// EVALSHA. SCRIPT LOAD of a read body goes to every upstream.
//
// SwapRoutes replaces the routes at run time (a reload); batches already
// being decided finish on the old ones. The upstream set cannot change
// without a restart.
//
// The client-side answer for the version key (GET {emq}:version is the
// map's legacy brand for a wire-4 session) holds only while every
// upstream's fence holds, and readiness needs every upstream fenced: a
// wire-4 client must not pass its own fence while any node its queues may
// be routed to is unfit. Keyless commands (DBSIZE, SCAN, INFO, SCRIPT
// EXISTS, ...) see only the default route's node.

// Role is what an upstream node runs (package upstream).
type Role = upstream.Role

// The roles.
const (
	RoleModule  = upstream.RoleModule
	RoleScripts = upstream.RoleScripts
)

// Route sends the queues matching any of its globs to an upstream.
type Route = plan.Route

// defaultRoutes sends every queue to up.
func defaultRoutes(up *upstream.Upstream) []Route {
	return []Route{{Queues: []string{"*"}, Upstream: up.Name()}}
}

// compileRoutes checks rs against the server's upstreams, by the
// configuration's rule (config.CheckRoutes), and builds a router. Every
// problem is named in the error, which wraps ErrRoutes.
func (s *Server) compileRoutes(rs []Route) (*plan.Router, error) {
	crs := make([]config.Route, len(rs))
	for i, rt := range rs {
		crs[i] = config.Route(rt)
	}
	if err := config.CheckRoutes(crs, s.upstreamNames()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRoutes, err)
	}
	ups := make([]*upstream.Upstream, len(rs))
	for i, rt := range rs {
		ups[i] = s.byName[rt.Upstream]
	}
	return plan.NewRouter(rs, ups), nil
}

// SwapRoutes replaces the routes (a reload). It refuses, keeping the old
// routes, a set that names an upstream the server does not have (the
// upstream set is fixed until a restart), a bad pattern, or one whose last
// route does not match every queue. Batches already being decided finish
// on the old routes; connections are not dropped.
func (s *Server) SwapRoutes(rs []Route) error {
	r, err := s.compileRoutes(rs)
	if err != nil {
		return err
	}
	if s.ctl != nil {
		s.ctl.setRoutes(r) // control.go: the moved queues' owners stay
	} else {
		s.routes.Store(r)
	}
	s.log.Info("routes in use", zap.String("routes", FormatRoutes(r.Spec())))
	return nil
}

// CheckRoutes reports whether SwapRoutes would accept rs, changing nothing.
func (s *Server) CheckRoutes(rs []Route) error {
	_, err := s.compileRoutes(rs)
	return err
}

// Routes returns the routes in use.
func (s *Server) Routes() []Route { return slices.Clone(s.routes.Load().Spec()) }

// RouteFor returns the name of the upstream a queue routes to now.
func (s *Server) RouteFor(queue string) string { return s.routes.Load().ForQueue([]byte(queue)).Name() }

// QueueRoute returns the name of the upstream routes rs send queue to, as
// a server with those routes does before any queue moved (package plan's
// QueueRoute, the router's own rule), for a tool that reads a
// configuration and starts no server.
func QueueRoute(rs []Route, queue string) string { return plan.QueueRoute(rs, queue) }

// FormatRoutes renders routes on one line for logs: "billing*->scripts-b; *->module-a".
func FormatRoutes(rs []Route) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strings.Join(r.Queues, ",") + "->" + r.Upstream
	}
	return strings.Join(parts, "; ")
}

// upstreamNames returns the upstream names in Options order.
func (s *Server) upstreamNames() []string {
	names := make([]string, len(s.ups))
	for i, u := range s.ups {
		names[i] = u.Name()
	}
	return names
}
