package clients

import "sync"

// Client is a session as the registry and the CLIENT commands see it.
// Package session's *Session implements it.
type Client interface {
	comparable
	// ID is the session's id (CLIENT ID, HELLO), from 1.
	ID() uint64
	// View is what CLIENT LIST shows of the session.
	View() *View
	// Close closes the client's connection: its session ends once its
	// goroutine finds it closed.
	Close()
}

// Registry is a server's sessions: CLIENT LIST shows them, CLIENT KILL
// and a tracking client's REDIRECT find them by id. Its zero value is an
// empty registry.
//
// It is generic over the session's type, not a registry of Client values,
// so that the server walks its own sessions (Each(f) with f a method of
// the session: Wake, Close) and finds them by id with no assertion, and
// so that this package needs no more of a session than Client says.
//
// Sessions are kept by id, so finding one (byID, Listed: asked as
// sessions end and tracking clients redirect) costs the same with ten
// clients or ten thousand.
type Registry[C Client] struct {
	mu sync.Mutex
	m  map[uint64]C
}

// Add lists c.
func (r *Registry[C]) Add(c C) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[uint64]C{}
	}
	r.m[c.ID()] = c
	r.mu.Unlock()
}

// Remove unlists c.
func (r *Registry[C]) Remove(c C) {
	r.mu.Lock()
	if r.m[c.ID()] == c {
		delete(r.m, c.ID())
	}
	r.mu.Unlock()
}

// Each calls f for every listed session, under the registry's lock.
func (r *Registry[C]) Each(f func(C)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.m {
		f(c)
	}
}

// byID returns the listed session id, and whether there is one.
func (r *Registry[C]) byID(id uint64) (C, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.m[id]
	return c, ok
}

// Listed reports whether session id is listed (ending ones included).
func (r *Registry[C]) Listed(id uint64) bool {
	_, ok := r.byID(id)
	return ok
}
