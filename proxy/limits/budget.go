package limits

import (
	"errors"
	"sync"
)

// ErrClosed is returned by Budget.Take once the budget is closed.
var ErrClosed = errors.New("limits: budget closed")

// Budget is a process-wide budget of held bytes. Input waits for room in
// the order it asked (Take); replies, transactions and subscribers, which
// cannot wait, take what fits or nothing (TryTake). One holder of part of
// a command at a time may go past the limit, so the bound is the limit
// plus one command. Its methods are safe for concurrent use.
type Budget struct {
	limit int64

	mu     sync.Mutex
	used   int64
	over   uint64     // the session past the budget (see above), 0 = none
	queue  []*memWait // input waiting for room, in order
	held   int        // how many of queue are holders
	closed bool       // shutting down: input waits no longer
	waits  int64      // input waits since the start (metrics)
}

// memWait is one input waiting for room.
type memWait struct {
	n       int64
	id      uint64
	holder  bool
	granted bool
	ready   chan struct{} // closed when granted, or when the budget closes
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Limit returns the budget's size in bytes.
func (m *Budget) Limit() int64 { return m.limit }

// Take takes n bytes for session id's input, waiting until they are
// granted. holder says the session holds part of a command already. It
// fails (ErrClosed) only when the budget is closed.
func (m *Budget) Take(id uint64, n int64, holder bool) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if m.grantLocked(id, n, holder, len(m.queue) == 0) {
		m.mu.Unlock()
		return nil
	}
	w := &memWait{n: n, id: id, holder: holder, ready: make(chan struct{})}
	m.queue = append(m.queue, w)
	if holder {
		m.held++
	}
	m.waits++
	m.mu.Unlock()
	<-w.ready
	if !w.granted {
		return ErrClosed
	}
	return nil
}

// grantLocked grants n bytes when they fit (first: nobody waits ahead, or
// a holder, which goes before those that hold nothing), or to a holder
// past the budget when no other session is past it. The caller holds mu.
func (m *Budget) grantLocked(id uint64, n int64, holder, first bool) bool {
	switch {
	case (first || holder) && m.used+n <= m.limit:
	case holder && (m.over == 0 || m.over == id):
		m.over = id
	default:
		return false
	}
	m.used += n
	return true
}

// TryTake takes n bytes when they fit, without waiting (replies,
// transactions, subscribers: they cannot wait). Waiting input does not go
// before them: what is being answered is released soonest.
func (m *Budget) TryTake(n int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.used+n > m.limit {
		return false
	}
	m.used += n
	return true
}

// Force takes n bytes whether they fit or not: for a copy of bytes already
// held, released soon after (a batch's replies gathered for the client).
func (m *Budget) Force(n int64) {
	m.mu.Lock()
	m.used += n
	m.mu.Unlock()
}

// Give releases n bytes and grants what now fits.
func (m *Budget) Give(n int64) {
	if n == 0 {
		return
	}
	m.mu.Lock()
	m.used -= n
	m.wakeLocked()
	m.mu.Unlock()
}

// Done releases session id's place past the budget, if it has it: it
// holds no input any more.
func (m *Budget) Done(id uint64) {
	m.mu.Lock()
	if m.over == id {
		m.over = 0
		m.wakeLocked()
	}
	m.mu.Unlock()
}

// wakeLocked grants the waiting input that now fits, in order; a holder
// is not kept waiting behind input that does not fit. The caller holds mu.
//
// Past the first input that does not fit only holders can be granted, so
// the walk stops there when no holder waits further on: a Give (one per
// batch answered) costs what it grants, not the length of the queue, when
// thousands of clients wait for room.
func (m *Budget) wakeLocked() {
	q := m.queue[:0]
	first := true
	holders := m.held // holders from here on
	for i, w := range m.queue {
		if !first && holders == 0 {
			q = append(q, m.queue[i:]...) // none of them can be granted
			break
		}
		if w.holder {
			holders--
		}
		if m.grantLocked(w.id, w.n, w.holder, first) {
			w.granted = true
			if w.holder {
				m.held--
			}
			close(w.ready)
			continue
		}
		first = false
		q = append(q, w)
	}
	clear(m.queue[len(q):])
	m.queue = q
}

// Close ends every wait (the server shuts down); later takes fail.
func (m *Budget) Close() {
	m.mu.Lock()
	m.closed = true
	for _, w := range m.queue {
		close(w.ready)
	}
	m.queue, m.held = nil, 0
	m.mu.Unlock()
}

// InUse returns the bytes held now and the input waits so far.
func (m *Budget) InUse() (used, waits int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used, m.waits
}
