package proxy

import (
	"runtime/debug"
	"sync"
)

// The runtime's soft memory limit, kept at what the proxy may hold.
//
// The memory budget (budget.go) bounds the bytes clients make the proxy
// hold, but the garbage collector paces itself by heap growth (GOGC): a
// large command or reply that is done is garbage until the next cycle, and
// a burst of them (eight 96 MiB SETs one after another, a client's first
// part of 1 MiB replies) takes the process to twice the budget or more
// before the collector catches up. With Options.SoftMemoryLimit the server
// sets the runtime's soft memory limit (debug.SetMemoryLimit) to the
// budget, plus memLimitBase for the runtime, the upstream connections and
// the collector's headroom, plus memPerClient for each client connected
// (its read buffer and goroutine): the collector then runs as the heap
// nears what the proxy may hold, not when it has doubled. The limit is
// soft: a live heap above it makes the collector run more often (at most
// half the processor, the runtime's own cap), never an error.

// memLimitBase is the fixed part of the soft memory limit.
const memLimitBase = 64 << 20

// memPerClient is the soft memory limit's allowance per connected client:
// a read buffer of up to 64 KiB kept between batches and a goroutine stack
// (the 5,000-client test measures about 13 KiB per idle client).
const memPerClient = 64 << 10

// memLimitStep is how far the client count moves before the limit is set
// again.
const memLimitStep = 64

// memLimit keeps the soft memory limit (see above).
type memLimit struct {
	mu      sync.Mutex
	budget  int64
	clients int64 // the count the limit was last set for; -1: never set
}

// newMemLimit sets the limit for no client; nil when off.
func newMemLimit(on bool, budget int64) *memLimit {
	if !on {
		return nil
	}
	m := &memLimit{budget: budget, clients: -1}
	m.track(0)
	return m
}

// track sets the limit for clients connected, when the count moved by
// memLimitStep since it was last set.
func (m *memLimit) track(clients int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.clients >= 0 && clients > m.clients-memLimitStep && clients < m.clients+memLimitStep {
		return
	}
	m.clients = clients
	debug.SetMemoryLimit(m.limit())
}

// limit is the soft limit for the last client count set.
func (m *memLimit) limit() int64 {
	return m.budget + memLimitBase + m.clients*memPerClient
}
