package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kinds of history events.
const (
	// KindInvoke is a worker's call as it is sent.
	KindInvoke = "invoke"
	// KindOK is a call's reply (Int, Job, Empty as the operation answers).
	KindOK = "ok"
	// KindErr is a call that ended with an error: an error reply, a broken
	// connection or its deadline (Timeout). Its command may have been
	// applied.
	KindErr = "err"
	// KindFault is a nemesis event: a fault begins (Phase "start") or ends
	// ("end"), with what was done in Detail.
	KindFault = "fault"
	// KindStats is one node's command statistics (Counts), taken before
	// the node is killed and at the end.
	KindStats = "stats"
	// KindConfig is the campaign's parameters, the first line.
	KindConfig = "config"
	// KindInfo is anything else worth reading next to the calls.
	KindInfo = "info"
	// KindLeftovers is the run of `queue leftovers --remove` at the end:
	// Counts "keys", "queues", "removed", "skipped" (queues left alone),
	// the command's summary or error in Detail.
	KindLeftovers = "leftovers"
)

// Operations of the workers.
const (
	OpEnqueue  = "enqueue"
	OpClaim    = "claim"
	OpComplete = "complete"
	OpFail     = "fail"
	OpExtend   = "extend"
	OpRetry    = "retry"
	OpReap     = "reap"
	OpPromote  = "promote"
)

// Event is one line of the history.
type Event struct {
	T    int64  `json:"t"` // wall clock, unix microseconds (the servers' lease clock is this machine's)
	Kind string `json:"kind"`
	Proc string `json:"proc,omitempty"` // worker ("w03", "drain") or "nemesis"
	Call int64  `json:"call,omitempty"` // the call's number, shared by its invoke and its end

	// A call.
	Op      string `json:"op,omitempty"`
	Sidecar int    `json:"sidecar,omitempty"` // 1-based
	Queue   string `json:"queue,omitempty"`
	ID      string `json:"id,omitempty"`
	Payload string `json:"payload,omitempty"`
	Lease   int64  `json:"lease,omitempty"` // ms, claim and extend

	// Its end.
	Int     int64  `json:"int,omitempty"`
	Job     *Job   `json:"job,omitempty"`
	Empty   bool   `json:"empty,omitempty"`
	Err     string `json:"err,omitempty"`
	Timeout bool   `json:"timeout,omitempty"`

	// A fault, stats, config.
	Fault  string           `json:"fault,omitempty"`
	Phase  string           `json:"phase,omitempty"`
	Node   string           `json:"node,omitempty"`
	Role   string           `json:"role,omitempty"` // "module" or "scripts", for stats
	Counts map[string]int64 `json:"counts,omitempty"`
	Detail string           `json:"detail,omitempty"`
	// CallBound is the longest a call may take (config line), in ms.
	CallBound int64  `json:"call_bound_ms,omitempty"`
	Seed      uint64 `json:"seed,omitempty"`

	// Line is the event's line number in the file (set by the reader and
	// the writer, not written).
	Line int `json:"-"`
}

// Job is a claim's reply.
type Job struct {
	ID       string `json:"id"`
	Payload  string `json:"payload"`
	Attempts int64  `json:"attempts"`
}

// History writes events as JSON lines, each flushed to the file as it is
// written; the checker reads the file back (a long campaign's history does
// not stay in memory while it runs).
type History struct {
	mu    sync.Mutex
	f     *os.File
	w     *bufio.Writer
	lines int
	calls int64
	err   error
}

// NewHistory creates the history file at path.
func NewHistory(path string) (*History, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("chaos: history: %w", err)
	}
	return &History{f: f, w: bufio.NewWriter(f)}, nil
}

// NextCall returns a new call number.
func (h *History) NextCall() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	return h.calls
}

// Add stamps e with the time when it has none and writes it.
func (h *History) Add(e Event) Event {
	if e.T == 0 {
		e.T = time.Now().UnixMicro()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines++
	e.Line = h.lines
	b, err := json.Marshal(e)
	if err == nil {
		_, err = h.w.Write(append(b, '\n'))
	}
	if err == nil {
		err = h.w.Flush()
	}
	if err != nil && h.err == nil {
		h.err = err
	}
	return e
}

// Close flushes and closes the file, and returns the first write error.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.w.Flush(); err != nil && h.err == nil {
		h.err = err
	}
	if err := h.f.Close(); err != nil && h.err == nil {
		h.err = err
	}
	return h.err
}

// ReadHistory parses a history file's lines.
func ReadHistory(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("chaos: history line %d: %w", n, err)
		}
		e.Line = n
		out = append(out, e)
	}
	return out, sc.Err()
}

// String is the event as its line in the file, with its number.
func (e Event) String() string {
	b, _ := json.Marshal(e)
	return fmt.Sprintf("%6d %s", e.Line, b)
}
