package capture

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxBytes  = 1 << 30  // 1 GiB over all capture files of the directory
	DefaultFileBytes = 64 << 20 // rotate past 64 MiB
	DefaultQueueLen  = 1 << 16  // records waiting for the writer
)

// flushEvery is how often buffered records reach the file.
const flushEvery = time.Second

// The data path hands records over without waking the writer: it takes
// them every drainEvery, or as soon as wakeAt are waiting. A wake-up per
// record (per client round trip at pipeline 1) cost the data path's one P
// a goroutine switch each; this way one switch serves hundreds.
const (
	drainEvery = 5 * time.Millisecond
	wakeAt     = 256
)

// Options configures a Writer.
type Options struct {
	// Dir is the directory of the capture's files (made when missing).
	Dir string
	// MaxBytes bounds the bytes of all capture files in Dir
	// (DefaultMaxBytes): those already there when the writer opens (earlier
	// captures, of this process or another) count, and Open refuses with
	// ErrBudget when they leave no room; past it the writer stops for good.
	MaxBytes int64
	// FileBytes rotates to a new file past this size (DefaultFileBytes,
	// at most MaxBytes).
	FileBytes int64
	// Redact replaces job data with stand-ins keyed by a secret of this
	// writer's own (redact.go).
	Redact bool
	// QueueLen bounds the records Add and AddBatch leave waiting to be
	// written (DefaultQueueLen); a record added to a full queue is dropped
	// and counted.
	QueueLen int
	// BufferBytes bounds the chunks of the writer's streams, filled or
	// waiting for the writer (DefaultBufferBytes); a record that finds
	// them full is dropped and counted (stream.go).
	BufferBytes int64
	// MapDigest and Queues go into each file's header.
	MapDigest string
	Queues    []string
	// Counters, when set, is counted on (shared by successive writers, for
	// metrics); else the writer has its own.
	Counters *Counters
	// Log, when set, is told once when the writer stops (MaxBytes reached,
	// or a write failed); it is called on the writer's goroutine.
	Log func(msg string, err error)

	// beforeDrain, when set (by a test of this package), runs on the
	// writer's goroutine before each visit of the streams.
	beforeDrain func()
}

// Counters are what writers did; safe for concurrent use.
type Counters struct {
	Records      atomic.Int64 // records written
	Bytes        atomic.Int64 // bytes written, headers included
	Files        atomic.Int64 // files opened
	DroppedFull  atomic.Int64 // records dropped on a full queue
	DroppedMax   atomic.Int64 // records dropped past MaxBytes
	DroppedError atomic.Int64 // records dropped after a write failed
}

// Stats describe one writer.
type Stats struct {
	Dir     string `json:"dir"`
	Files   int    `json:"files"`
	Bytes   int64  `json:"bytes"`
	Records int64  `json:"records"`
	Dropped int64  `json:"dropped"`
	Stopped string `json:"stopped,omitempty"` // why it stopped writing, if it did
	// EarlierBytes are the bytes of the capture files that were in Dir
	// when the writer opened; they count against MaxBytes.
	EarlierBytes int64 `json:"earlier_bytes"`
	MaxBytes     int64 `json:"max_bytes"`
}

// ErrBudget is Open's error when the capture files already in the
// directory leave no room under MaxBytes.
var ErrBudget = errors.New("capture: disk budget spent")

// Writer appends records to a capture's files from its own goroutine.
type Writer struct {
	o       Options
	c       *Counters
	mu      sync.Mutex
	pend    []*Record     // records waiting for the writer (under mu)
	wake    chan struct{} // the writer is woken early: wakeAt records wait
	queued  atomic.Int64  // records waiting
	quit    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	stopped atomic.Pointer[string] // why writing stopped; Add drops at once
	earlier int64                  // bytes of the capture files in Dir at Open
	red     *redactor              // with Options.Redact

	smu      sync.Mutex
	added    []*Stream    // streams not yet seen by the writer (under smu)
	buffered atomic.Int64 // bytes of the streams' chunks

	// Owned by the writer goroutine (read by Stats through atomics).
	started   time.Time
	f         *os.File
	bw        *bufio.Writer
	fileN     atomic.Int64
	fileBytes int64
	total     atomic.Int64
	records   atomic.Int64
	dropped   atomic.Int64
	buf       []byte
	err       error
	streams   []*Stream
	rec       Record            // reused for the streams' records
	names     map[string]string // intern
}

// Open makes the directory, opens the first file and starts the writer.
func Open(o Options) (*Writer, error) {
	if o.Dir == "" {
		return nil, errors.New("capture: no directory")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.FileBytes <= 0 {
		o.FileBytes = DefaultFileBytes
	}
	o.FileBytes = min(o.FileBytes, o.MaxBytes)
	if o.QueueLen <= 0 {
		o.QueueLen = DefaultQueueLen
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = DefaultBufferBytes
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	earlier, err := DirBytes(o.Dir)
	if err != nil {
		return nil, err
	}
	// Room for at least a file's header and a small record.
	if earlier+1024 > o.MaxBytes {
		return nil, fmt.Errorf("%w: %s already holds %d bytes of capture files and max_bytes is %d; remove old captures or raise max_bytes",
			ErrBudget, o.Dir, earlier, o.MaxBytes)
	}
	w := &Writer{
		o:       o,
		c:       o.Counters,
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		started: time.Now(),
		bw:      bufio.NewWriterSize(nil, 256<<10),
		earlier: earlier,
		names:   map[string]string{},
	}
	if o.Redact {
		w.red = newRedactor()
	}
	if w.c == nil {
		w.c = new(Counters)
	}
	if err := w.rotate(); err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

// Add queues r for writing and returns at once; false when r was dropped
// (the queue is full, or the writer stopped or is closed). The writer owns
// r and its slices from then on.
func (w *Writer) Add(r *Record) bool { return w.AddBatch([]*Record{r}) }

// AddBatch queues the records of rs (one hand-over for all of them: the
// writer wakes once per batch, not per record) and returns at once; false
// when they were dropped, all of them (the queue would hold more than
// QueueLen records, or the writer stopped or is closed). The writer owns
// rs and the records from then on.
func (w *Writer) AddBatch(rs []*Record) bool {
	n := int64(len(rs))
	if w.closed.Load() || n == 0 {
		return false
	}
	if w.stopped.Load() != nil {
		w.dropped.Add(n)
		w.c.DroppedMax.Add(n)
		return false
	}
	if w.queued.Add(n) > int64(w.o.QueueLen) {
		w.queued.Add(-n)
		w.dropped.Add(n)
		w.c.DroppedFull.Add(n)
		return false
	}
	w.mu.Lock()
	w.pend = append(w.pend, rs...)
	full := len(w.pend) >= wakeAt
	w.mu.Unlock()
	if full {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// take returns the records waiting and empties the list.
func (w *Writer) take() []*Record {
	w.mu.Lock()
	rs := w.pend
	w.pend = nil
	w.mu.Unlock()
	return rs
}

// Close writes what is queued, closes the file and stops the writer. It
// returns the first write error, if any.
func (w *Writer) Close() error {
	if w.closed.Swap(true) {
		<-w.done
		return w.err
	}
	close(w.quit)
	<-w.done
	return w.err
}

// Stats returns what the writer has done so far.
func (w *Writer) Stats() Stats {
	s := Stats{
		Dir:     w.o.Dir,
		Files:   int(w.fileN.Load()),
		Bytes:   w.total.Load(),
		Records: w.records.Load(),
		Dropped: w.dropped.Load(),

		EarlierBytes: w.earlier,
		MaxBytes:     w.o.MaxBytes,
	}
	if why := w.stopped.Load(); why != nil {
		s.Stopped = *why
	}
	return s
}

func (w *Writer) run() {
	defer close(w.done)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	drain := time.NewTicker(drainEvery)
	defer drain.Stop()
	for {
		select {
		case <-w.wake:
			w.writeAll(w.take())
		case <-drain.C:
			if rs := w.take(); len(rs) > 0 {
				w.writeAll(rs)
			}
			w.drainStreams()
		case <-tick.C:
			w.flush()
		case <-w.quit:
			w.writeAll(w.take())
			w.drainStreams()
			w.forgetStreams()
			w.flush()
			if w.f != nil {
				if err := w.f.Close(); err != nil && w.err == nil {
					w.err = err
				}
			}
			return
		}
	}
}

// stop makes the writer drop every later record, and says why once.
func (w *Writer) stop(why string, err error) {
	if w.stopped.Load() != nil {
		return
	}
	w.stopped.Store(&why)
	if err != nil && w.err == nil {
		w.err = err
	}
	if w.o.Log != nil {
		w.o.Log(why, err)
	}
}

func (w *Writer) writeAll(rs []*Record) {
	w.queued.Add(-int64(len(rs)))
	for _, r := range rs {
		w.write(r)
	}
}

func (w *Writer) write(r *Record) {
	if w.stopped.Load() != nil {
		w.dropped.Add(1)
		if w.err != nil {
			w.c.DroppedError.Add(1)
		} else {
			w.c.DroppedMax.Add(1)
		}
		return
	}
	if w.red != nil {
		w.red.redact(r)
	}
	// The frame is built in one reused buffer: its head, then the body.
	frame := r.AppendBinary(append(w.buf[:0], make([]byte, frameHead)...))
	w.buf = frame
	body := frame[frameHead:]
	size := int64(len(frame))
	if w.earlier+w.total.Load()+size > w.o.MaxBytes {
		w.stop(fmt.Sprintf("capture stopped: max_bytes (%d) reached over the capture files of %s (%d bytes of them from earlier captures)",
			w.o.MaxBytes, w.o.Dir, w.earlier), nil)
		w.dropped.Add(1)
		w.c.DroppedMax.Add(1)
		return
	}
	if w.fileBytes+size > w.o.FileBytes {
		if err := w.rotate(); err != nil {
			w.stop("capture stopped: cannot open the next file", err)
			w.dropped.Add(1)
			w.c.DroppedError.Add(1)
			return
		}
	}
	putFrameHead(frame, body)
	if err := w.put(frame); err != nil {
		w.stop("capture stopped: write failed", err)
		w.dropped.Add(1)
		w.c.DroppedError.Add(1)
		return
	}
	w.records.Add(1)
	w.c.Records.Add(1)
}

// put writes bytes to the current file's buffer and counts them.
func (w *Writer) put(b []byte) error {
	if _, err := w.bw.Write(b); err != nil {
		return err
	}
	w.fileBytes += int64(len(b))
	w.total.Add(int64(len(b)))
	w.c.Bytes.Add(int64(len(b)))
	return nil
}

func (w *Writer) flush() {
	if w.f == nil || w.bw.Buffered() == 0 {
		return
	}
	if err := w.bw.Flush(); err != nil {
		w.stop("capture stopped: write failed", err)
	}
}

// rotate closes the current file and opens the next one with its header.
func (w *Writer) rotate() error {
	if w.f != nil {
		if err := w.bw.Flush(); err != nil {
			return err
		}
		if err := w.f.Close(); err != nil {
			return err
		}
		w.f = nil
	}
	n := int(w.fileN.Load()) + 1
	name := fmt.Sprintf("capture-%s-%06d%s", w.started.UTC().Format("20060102T150405.000000Z"), n, Ext)
	f, err := os.OpenFile(filepath.Join(w.o.Dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	hdr, err := json.Marshal(Header{
		Format: Version, MapDigest: w.o.MapDigest, Redacted: w.o.Redact,
		Started: w.started.UnixMicro(), File: n, Queues: w.o.Queues,
	})
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("capture: %w", err)
	}
	w.f = f
	w.bw.Reset(f)
	w.fileBytes = 0
	w.fileN.Store(int64(n))
	w.c.Files.Add(1)
	return w.put(appendFrame(fileHead(), hdr))
}

// DirBytes returns the bytes of the capture files (named *.emqcap) in
// dir; a missing dir holds none.
func DirBytes(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("capture: %w", err)
	}
	var n int64
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), Ext) {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("capture: %w", err)
		}
		n += info.Size()
	}
	return n, nil
}
