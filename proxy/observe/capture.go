package observe

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
	"github.com/emqproxy/emqproxy/rewrite"
)

// The capture: for the queues a capture names, every command the proxy
// forwards for them is recorded in the client's original form (the
// EVALSHA or EVAL line before any rewrite, and plain commands on the
// queue's keys), with the reply the upstream gave and its time, for a
// replay (`emqproxy verify --replay`).
//
// The session's calls (doc.go): Forwarded right after a command is added
// to its segment, Awaiting, Finish and Publish once the segment's replies
// are in, before they move to the output, and End when the session ends.
//
// With no capture running, Forwarded is one atomic load and Awaiting one
// length check. A running capture copies the command (its arguments alias
// the read buffer) into the session's stream (capture.Stream) when it
// decides it, and the reply once the segment's replies are in; the
// segment's records are published to the writer with one atomic store.
// The writer takes them in batches and never blocks the session: when it
// falls behind, the streams' buffers stop at their bound and records are
// dropped and counted. The session's end closes its stream (End).
//
// What is recorded: a script call's queue is its first key's hashtag (as
// the audit log's: rewrite.ScriptCall.Queue); a plain command's is that of
// its first argument that is a job-core key (emq:{<queue>}:...;
// rewrite.QueueOf's FirstJobKey rule). Commands queued in MULTI ... EXEC are
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

// ErrCapture is wrapped by Start's and Stop's errors.
var ErrCapture = errors.New("proxy: capture")

// Capture is the server's capture: the running one, if any, and the
// counters that outlive it. Its zero value runs none.
type Capture struct {
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

// Start starts capturing the queues of o into o.Dir; digest is the map's
// digest in use, for the files' header, and log the server's log. One
// capture runs at a time.
func (cs *Capture) Start(o CaptureOptions, digest string, log *zap.Logger) error {
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
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.active.Load() != nil {
		return fmt.Errorf("%w: a capture is already running", ErrCapture)
	}
	w, err := capture.Open(capture.Options{
		Dir: o.Dir, MaxBytes: o.MaxBytes, FileBytes: o.FileBytes, Redact: o.Redact, QueueLen: o.QueueLen,
		MapDigest: digest, Queues: o.Queues, Counters: &cs.counters,
		Log: func(msg string, err error) { log.Warn(msg, zap.String("dir", o.Dir), zap.Error(err)) },
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCapture, err)
	}
	cs.active.Store(&capturer{o: o, w: w})
	log.Info("capture started", zap.String("dir", o.Dir), zap.Strings("queues", o.Queues),
		zap.Int64("max_bytes", w.Stats().MaxBytes), zap.Int64("earlier_bytes", w.Stats().EarlierBytes), zap.Bool("redact", o.Redact))
	return nil
}

// Stop stops the running capture, writes what it has queued and returns
// what it did; running is false when none was running.
func (cs *Capture) Stop(log *zap.Logger) (st capture.Stats, running bool, err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.active.Swap(nil)
	if c == nil {
		return st, false, nil
	}
	err = c.w.Close()
	st = c.w.Stats()
	log.Info("capture stopped", zap.String("dir", st.Dir), zap.Int64("records", st.Records),
		zap.Int64("bytes", st.Bytes), zap.Int64("dropped", st.Dropped), zap.Error(err))
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrCapture, err)
	}
	return st, true, err
}

// Stats returns what the running capture has done so far; running is
// false when none runs.
func (cs *Capture) Stats() (st capture.Stats, running bool) {
	c := cs.active.Load()
	if c == nil {
		return st, false
	}
	return c.w.Stats(), true
}

// capState is a session's side of the running capture: its stream (the
// buffer it copies records into, capture.Stream) and the segment's records
// waiting for their replies.
type capState struct {
	c    *capturer       // the capture st belongs to
	st   *capture.Stream // nil until the session records a call
	pend []Pending
	keys []int // scratch: a plain command's key positions
	// The last queue asked of a capture, and its answer.
	qc  *capturer
	q   []byte
	qOK bool
}

// Pending is a capture record of the current segment waiting for its
// reply (Awaiting).
type Pending struct {
	Slot int // the slot Forwarded was given: where the session finds the reply
	i    int // the record's index in the stream (Begin)
}

// Forwarded records a command just added to the segment, with its reply in
// the session's slot, when a running capture wants its queue: its head
// and arguments are copied into the session's stream, to be finished with
// the reply (Finish). ck is the command's entry in the servers' table, as
// the plan found it (nil: looked up when needed); began is when its batch
// was framed.
func (o *Session) Forwarded(slot int, args [][]byte, d *rewrite.Decision, ck *cmdtable.Entry, began time.Time) {
	cs := &o.cs
	if cs.st != nil && cs.c != o.cfg.Capture.active.Load() {
		o.End() // its capture stopped: the stream's chunk is let go
	}
	q, c := o.queue(args, d)
	if c == nil {
		return
	}
	if cs.st == nil {
		cs.c, cs.st = c, c.w.NewStream()
	}
	call := capture.Call{Seq: c.seq.Add(1), Time: began, Conn: o.cfg.Conn, Queue: q}
	if d.Script != nil {
		call.Script, call.Token = d.Script.Name, d.Script.Verb
		call.Payload = d.Script.Payload()
	} else if c.o.Redact {
		call.KeysSet, call.Name, call.Keys = o.keyPositions(args, ck)
	}
	i := cs.st.Begin(&call, args)
	cs.pend = append(cs.pend, Pending{Slot: slot, i: i})
}

// queue returns the queue of a forwarded command and the running capture
// when it wants that queue.
func (o *Session) queue(args [][]byte, d *rewrite.Decision) ([]byte, *capturer) {
	c := o.cfg.Capture.active.Load()
	if c == nil || d.Effect == rewrite.Subscribe {
		return nil, nil
	}
	q := d.Queue // a script call's (rewrite.ScriptCall.Queue)
	if d.SHA == "" {
		q = rewrite.QueueOf(args[1:], rewrite.FirstJobKey)
	}
	if len(q) == 0 {
		return nil, nil
	}
	cs := &o.cs
	if cs.qc != c || string(cs.q) != string(q) {
		cs.qc, cs.q, cs.qOK = c, append(cs.q[:0], q...), c.wants(q)
	}
	if !cs.qOK {
		return nil, nil
	}
	return q, c
}

// Awaiting returns the segment's records waiting for their replies, in
// the order Forwarded made them. Once every reply of the segment is in,
// before they move to the output, the session gives each record that was
// sent its reply (Finish) and then calls Publish; a record left without
// one (its command never sent, or no reply) is dropped.
func (o *Session) Awaiting() []Pending { return o.cs.pend }

// Finish gives the record p its reply, read at now. The reply is copied.
func (o *Session) Finish(p Pending, reply []byte, now time.Time) {
	o.cs.st.Finish(p.i, reply, now)
}

// Publish hands the segment's finished records to the capture's writer
// and forgets the pending ones.
func (o *Session) Publish() {
	cs := &o.cs
	if len(cs.pend) == 0 {
		return
	}
	cs.st.Publish()
	cs.pend = cs.pend[:0]
}

// End closes the session's stream, if any: its writer takes what it
// published and forgets it. The session's end calls it.
func (o *Session) End() {
	cs := &o.cs
	if cs.st != nil {
		cs.st.Publish() // records begun and not finished are dropped
		cs.st.Close()
	}
	cs.c, cs.st = nil, nil
	cs.pend = cs.pend[:0]
}

// keyPositions is where a plain command's name and keys are, for
// redaction: the length of its name and its key positions (in a scratch
// slice), when the servers' table knows (ck, its entry, or looked up when
// nil). A command the table does not know, or whose keys only COMMAND
// GETKEYS finds, is left to the capture's own rule: the arguments that are
// keys of the record's queue.
func (o *Session) keyPositions(args [][]byte, ck *cmdtable.Entry) (bool, int, []int) {
	keys := o.cfg.Keys
	if ck == nil {
		ck = keys.Lookup(args)
	}
	if ck == nil || ck.Ask {
		return false, 0, nil
	}
	name := 1
	if top := keys.Lookup(args[:1]); top != nil && top != ck {
		name = 2 // a subcommand's entry
	}
	o.cs.keys = ck.Positions(args, o.cs.keys[:0])
	return true, name, o.cs.keys
}

// Captured is the capture record of a bridged RESP3 client's command
// (Bridged): the relay finishes it with the server's reply. Its zero value
// records nothing.
type Captured struct {
	rec *capture.Record
	c   *capturer
}

// Bridged returns the capture record of a command a bridged client
// forwards, when a running capture wants its queue; the zero Captured
// otherwise. Its arguments are copied.
func (o *Session) Bridged(args [][]byte, d *rewrite.Decision, began time.Time) Captured {
	q, c := o.queue(args, d)
	if c == nil {
		return Captured{}
	}
	n := 0
	for _, a := range args {
		n += len(a)
	}
	buf := make([]byte, 0, n)
	cp := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		cp[i] = buf[len(buf)-len(a) : len(buf) : len(buf)]
	}
	rec := &capture.Record{Seq: c.seq.Add(1), Time: began, Conn: o.cfg.Conn, Queue: string(q), Args: cp}
	if d.Script != nil {
		rec.Script, rec.Token = d.Script.Name, d.Script.Verb
		rec.SetPayload(d.Script.Payload())
	} else if c.o.Redact {
		if set, name, keys := o.keyPositions(rec.Args, nil); set {
			rec.SetKeys(name, append([]int(nil), keys...))
		}
	}
	return Captured{rec: rec, c: c}
}

// Wanted reports whether a capture wants the record.
func (r Captured) Wanted() bool { return r.rec != nil }

// Reply finishes the record with the server's reply fr (copied) and hands
// it to the capture's writer; nothing for the zero Captured. The relay's
// goroutine calls it.
func (r Captured) Reply(fr []byte) {
	if r.rec == nil {
		return
	}
	r.rec.Reply = append([]byte(nil), fr...)
	r.rec.Latency = time.Since(r.rec.Time)
	r.c.w.AddBatch([]*capture.Record{r.rec})
}

// RegisterMetrics adds the capture's metrics to reg:
//
//	emqproxy_capture_active                  1 while a capture runs
//	emqproxy_capture_records_total           records written
//	emqproxy_capture_bytes_total             bytes written (file headers included)
//	emqproxy_capture_files_total             files opened
//	emqproxy_capture_dropped_total{reason}   records not written: queue_full (the
//	                                         writer fell behind), max_bytes, write_error
func (cs *Capture) RegisterMetrics(reg prometheus.Registerer) error {
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
