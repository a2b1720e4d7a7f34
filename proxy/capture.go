package proxy

import (
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/proxy/cmdtable"
	"github.com/emqproxy/emqproxy/proxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Capture: the proxy's side of package capture. For the queues a capture
// names, every command the proxy forwards for them is recorded in the
// client's original form (the EVALSHA or EVAL line before any rewrite, and
// plain commands on the queue's keys), with the reply the upstream gave
// and its time, for a replay (`emqproxy verify --replay`).
//
// Everything lives here; the data path has two call sites, and the
// session's end one:
//
//	session.command (session.go), right after s.forward(...):
//	    s.captureCommand(f, &d, entry)
//	session.flush (segment.go), right before s.emit():
//	    s.captureReplies()
//	session.cleanup (session.go):
//	    s.captureEnd()
//
// With no capture running, captureCommand is one atomic load and
// captureReplies one length check. A running capture copies the command
// (its arguments alias the read buffer) into the session's stream
// (capture.Stream) when it decides it, and the reply once the segment's
// replies are in; the segment's records are published to the writer with
// one atomic store. The writer takes them in batches and never blocks the
// session: when it falls behind, the streams' buffers stop at their bound
// and records are dropped and counted. The session's end closes its
// stream (cleanup calls captureEnd).
//
// What is recorded: a script call's queue is its first key's hashtag (as
// the audit log's); a plain command's is that of its first argument that is
// a job-core key (emq:{<queue>}:...). Commands queued in MULTI ... EXEC are
// not recorded (their replies arrive inside EXEC's), nor are commands the
// proxy answered itself or could not send (their batch never left), nor
// SCRIPT LOAD. Sequence numbers are taken when the command is decided, so
// one queue's records are in the order the proxy forwarded them.

// CaptureOptions configures a capture.
type CaptureOptions struct {
	// Queues are path.Match globs over queue names, as routes take them.
	Queues []string
	// Dir receives the capture files.
	Dir string
	// MaxBytes bounds the capture files in Dir, those of earlier captures
	// included (default capture.DefaultMaxBytes): a start with no room left
	// is refused, and past it the capture stops writing, logs it once and
	// counts drops.
	MaxBytes int64
	// FileBytes rotates files past this size (default capture.DefaultFileBytes).
	FileBytes int64
	// Redact replaces job data by same-length stand-ins keyed by a secret
	// of the capture's own (package capture).
	Redact bool
	// QueueLen bounds the records waiting for the writer (default
	// capture.DefaultQueueLen).
	QueueLen int
}

// ErrCapture is wrapped by StartCapture's and StopCapture's errors.
var ErrCapture = errors.New("proxy: capture")

// captureState is the server's capture: the running one, if any, and the
// counters that outlive it.
type captureState struct {
	mu       sync.Mutex // starts and stops
	active   atomic.Pointer[capturer]
	counters capture.Counters
}

// capturer is one running capture.
type capturer struct {
	o   CaptureOptions
	w   *capture.Writer
	seq atomic.Uint64
}

// wants reports whether queue q is captured.
func (c *capturer) wants(q []byte) bool {
	for _, g := range c.o.Queues {
		if g == "*" {
			return true
		}
		if ok, _ := path.Match(g, string(q)); ok {
			return true
		}
	}
	return false
}

// capState is a session's side of the running capture: its stream (the
// buffer it copies records into, capture.Stream) and the segment's records
// waiting for their replies.
type capState struct {
	c    *capturer       // the capture st belongs to
	st   *capture.Stream // nil until the session records a call
	pend []capPending
	keys []int // scratch: a plain command's key positions
	// The last queue asked of a capture, and its answer.
	qc  *capturer
	q   []byte
	qOK bool
}

type capPending struct {
	slot int // index in s.slots
	i    int // the record's index in the stream (Begin)
}

// captureCommand records the command just forwarded (the session's last
// slot) when a capture wants its queue (observe.go): its head and
// arguments are copied into the session's stream, to be finished with the
// reply by captureReplies.
// ck is the command's entry in the server's table, as the plan found it.
func (s *session) captureCommand(f resp.Frame, d *rewrite.Decision, ck *cmdtable.Entry) {
	if len(s.slots) == 0 || s.slots[len(s.slots)-1].local {
		return
	}
	cs := &s.cap
	if cs.st != nil && cs.c != s.srv.cap.active.Load() {
		s.captureEnd() // its capture stopped: the stream's chunk is let go
	}
	q, c := s.captureQueue(f, d)
	if c == nil {
		return
	}
	if cs.st == nil {
		cs.c, cs.st = c, c.w.NewStream()
	}
	call := capture.Call{Seq: c.seq.Add(1), Time: s.began, Conn: s.id, Queue: q}
	if d.Script != nil {
		call.Script, call.Token = d.Script.Name, d.Script.Verb
		call.Payload = d.Script.Payload()
	} else if c.o.Redact {
		call.KeysSet, call.Name, call.Keys = s.captureKeyPositions(f.Args, ck)
	}
	i := cs.st.Begin(&call, f.Args)
	cs.pend = append(cs.pend, capPending{slot: len(s.slots) - 1, i: i})
}

// captureQueue returns the queue of a forwarded command and the running
// capture when it wants that queue.
func (s *session) captureQueue(f resp.Frame, d *rewrite.Decision) ([]byte, *capturer) {
	c := s.srv.cap.active.Load()
	if c == nil || d.Effect == rewrite.Subscribe {
		return nil, nil
	}
	q := d.Queue
	if d.SHA == "" {
		q = queueOfArgs(f.Args)
	}
	if len(q) == 0 {
		return nil, nil
	}
	cs := &s.cap
	if cs.qc != c || string(cs.q) != string(q) {
		cs.qc, cs.q, cs.qOK = c, append(cs.q[:0], q...), c.wants(q)
	}
	if !cs.qOK {
		return nil, nil
	}
	return q, c
}

// captureReplies finishes the segment's records with their replies and
// publishes them to the capture's writer. It runs once every reply of the
// segment is in, before emit moves them to the output.
func (s *session) captureReplies() {
	cs := &s.cap
	if len(cs.pend) == 0 {
		return
	}
	now := time.Now()
	for _, p := range cs.pend {
		if p.slot >= len(s.slots) {
			continue
		}
		sl := s.slots[p.slot]
		if sl.local || sl.part >= len(s.parts) || !s.parts[sl.part].sent {
			continue // never sent: nothing reached the upstream
		}
		b := s.parts[sl.part].b
		if sl.idx >= len(b.Ends) {
			continue // no reply (the client is closed over the reply cap)
		}
		cs.st.Finish(p.i, b.Reply(sl.idx), now)
	}
	cs.st.Publish()
	cs.pend = cs.pend[:0]
}

// captureEnd closes the session's stream, if any: its writer takes what it
// published and forgets it. The session's end calls it (session.go).
func (s *session) captureEnd() {
	cs := &s.cap
	if cs.st != nil {
		cs.st.Publish() // records begun and not finished are dropped
		cs.st.Close()
	}
	cs.c, cs.st = nil, nil
	cs.pend = cs.pend[:0]
}

// captureKeyPositions is where a plain command's name and keys are, for
// redaction: the length of its name and its key positions (in a scratch
// slice), when the server's table knows (ck, its entry, or looked up when
// nil). A command the table does not know, or whose keys only COMMAND
// GETKEYS finds, is left to the capture's own rule: the arguments that are
// keys of the record's queue.
func (s *session) captureKeyPositions(args [][]byte, ck *cmdtable.Entry) (bool, int, []int) {
	if ck == nil {
		ck = s.srv.keys.Lookup(args)
	}
	if ck == nil || ck.Ask {
		return false, 0, nil
	}
	name := 1
	if top := s.srv.keys.Lookup(args[:1]); top != nil && top != ck {
		name = 2 // a subcommand's entry
	}
	s.cap.keys = ck.Positions(args, s.cap.keys[:0])
	return true, name, s.cap.keys
}

// captureKeys notes, for redaction, where a bridged record's name and keys
// are (captureKeyPositions).
func (s *session) captureKeys(rec *capture.Record) {
	if set, name, keys := s.captureKeyPositions(rec.Args, nil); set {
		rec.SetKeys(name, append([]int(nil), keys...))
	}
}

// queueOfArgs is the queue of a plain command: the hashtag of its first
// argument that is a job-core key (emq:{<queue>}:...).
func queueOfArgs(args [][]byte) []byte {
	for _, a := range args[1:] {
		if len(a) > 5 && string(a[:5]) == "emq:{" {
			if q := rewrite.Hashtag(a); q != nil {
				return q
			}
		}
	}
	return nil
}

// StartCapture starts capturing the queues of o into o.Dir. One capture
// runs at a time.
func (s *Server) StartCapture(o CaptureOptions) error {
	if o.Dir == "" {
		return fmt.Errorf("%w: no directory", ErrCapture)
	}
	if len(o.Queues) == 0 {
		return fmt.Errorf("%w: no queues", ErrCapture)
	}
	for _, g := range o.Queues {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			return fmt.Errorf("%w: queue pattern %q is not valid", ErrCapture, g)
		}
	}
	s.cap.mu.Lock()
	defer s.cap.mu.Unlock()
	if s.cap.active.Load() != nil {
		return fmt.Errorf("%w: a capture is already running", ErrCapture)
	}
	digest := ""
	if p := s.policy.Load(); p != nil && p.Map != nil {
		digest = p.Map.Digest
	}
	w, err := capture.Open(capture.Options{
		Dir: o.Dir, MaxBytes: o.MaxBytes, FileBytes: o.FileBytes, Redact: o.Redact, QueueLen: o.QueueLen,
		MapDigest: digest, Queues: o.Queues, Counters: &s.cap.counters,
		Log: func(msg string, err error) { s.log.Warn(msg, zap.String("dir", o.Dir), zap.Error(err)) },
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	s.cap.active.Store(&capturer{o: o, w: w})
	s.log.Info("capture started", zap.String("dir", o.Dir), zap.Strings("queues", o.Queues),
		zap.Int64("max_bytes", w.Stats().MaxBytes), zap.Int64("earlier_bytes", w.Stats().EarlierBytes), zap.Bool("redact", o.Redact))
	return nil
}

// StopCapture stops the running capture, writes what it has queued and
// returns what it did; running is false when none was running.
func (s *Server) StopCapture() (st capture.Stats, running bool, err error) {
	s.cap.mu.Lock()
	defer s.cap.mu.Unlock()
	c := s.cap.active.Swap(nil)
	if c == nil {
		return st, false, nil
	}
	err = c.w.Close()
	st = c.w.Stats()
	s.log.Info("capture stopped", zap.String("dir", st.Dir), zap.Int64("records", st.Records),
		zap.Int64("bytes", st.Bytes), zap.Int64("dropped", st.Dropped), zap.Error(err))
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrCapture, err)
	}
	return st, true, err
}

// CaptureStats returns what the running capture has done so far; running
// is false when none runs.
func (s *Server) CaptureStats() (st capture.Stats, running bool) {
	c := s.cap.active.Load()
	if c == nil {
		return st, false
	}
	return c.w.Stats(), true
}

// registerCaptureMetrics adds the capture's metrics to reg:
//
//	emqproxy_capture_active                  1 while a capture runs
//	emqproxy_capture_records_total           records written
//	emqproxy_capture_bytes_total             bytes written (file headers included)
//	emqproxy_capture_files_total             files opened
//	emqproxy_capture_dropped_total{reason}   records not written: queue_full (the
//	                                         writer fell behind), max_bytes, write_error
func (cs *captureState) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	value := func(v *atomic.Int64) func() float64 { return func() float64 { return float64(v.Load()) } }
	const dropHelp = "Capture records not written, by reason."
	cs2 := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "emqproxy_capture_active", Help: "1 while a capture runs."},
			func() float64 {
				if cs.active.Load() != nil {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "emqproxy_capture_records_total", Help: "Capture records written."},
			value(&cs.counters.Records)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "emqproxy_capture_bytes_total", Help: "Capture bytes written."},
			value(&cs.counters.Bytes)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "emqproxy_capture_files_total", Help: "Capture files opened."},
			value(&cs.counters.Files)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "emqproxy_capture_dropped_total", Help: dropHelp,
			ConstLabels: prometheus.Labels{"reason": "queue_full"}}, value(&cs.counters.DroppedFull)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "emqproxy_capture_dropped_total", Help: dropHelp,
			ConstLabels: prometheus.Labels{"reason": "max_bytes"}}, value(&cs.counters.DroppedMax)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "emqproxy_capture_dropped_total", Help: dropHelp,
			ConstLabels: prometheus.Labels{"reason": "write_error"}}, value(&cs.counters.DroppedError)),
	}
	for _, c := range cs2 {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
