package capture

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emqproxy/emqproxy/shamap"
)

// Streams: how a producer that records many calls (a proxy session) hands
// them to the writer at the cost of a copy.
//
// A Stream belongs to one goroutine, its producer. Begin copies a call
// (its head and arguments) into the stream's staging buffer, Finish copies
// it with its reply into the stream's current chunk, and Publish makes the
// finished records visible to the writer with one atomic store. Nothing on
// the producer's side allocates per record, takes a lock, sends on a
// channel, formats a time or makes a system call: a chunk (DefaultChunk
// bytes, or a record's size when larger) is taken from a pool when the
// current one is full, and a stream is registered with its writer once.
//
// The writer's goroutine visits every stream each drainEvery, takes the
// records published since its last visit, in the order they were
// published, and redacts, encodes, checksums and writes them as Add's
// records are, in large buffered writes; a chunk it has read to the end,
// and that its producer has left for the next, goes back to the pool.
//
// Memory is bounded: the chunks of all streams of a writer, filled or
// waiting, hold at most Options.BufferBytes. When the writer falls behind
// (a slow disk) and the producers' chunks reach that bound, a record that
// needs a new chunk is dropped and counted (Counters.DroppedFull), as a
// full queue drops Add's records: the producer never waits for the writer
// and the backlog never grows past the bound. The writer takes the
// records of a stream in order, so what a stream loses is a run of records
// at the bound, and its records before and after are written in order.

// The sizes of a stream's chunks: a stream starts with a small one and
// doubles the next while its chunks fill within growWithin, up to
// maxChunk; one that took longer than shrinkAfter to fill is followed by
// one half its size. A busy stream so hands over its records in large
// blocks, and an idle one holds little (a record larger than maxChunk gets
// a chunk of its size).
const (
	minChunk    = 4 << 10
	maxChunk    = 64 << 10
	growWithin  = time.Second
	shrinkAfter = 10 * time.Second
)

// DefaultBufferBytes bounds the chunks of all streams of a writer.
const DefaultBufferBytes = 64 << 20

// Call is the head of a call record a stream copies (see Record).
type Call struct {
	Seq    uint64
	Time   time.Time
	Conn   uint64
	Queue  []byte
	Script string
	Token  string
	// Payload is the script's payload positions (Record.SetPayload).
	Payload shamap.Payload
	// KeysSet, Name and Keys are a plain command's name and key positions
	// (Record.SetKeys).
	KeysSet bool
	Name    int
	Keys    []int
}

// chunk is a stream's buffer: its producer appends records to buf[:w]
// (buf's length is its capacity and never changes) and publishes their
// length in n; next is set once the producer moved on to the next chunk,
// after the last n it stores in this one.
type chunk struct {
	buf  []byte
	w    int // the producer's length
	n    atomic.Int64
	next atomic.Pointer[chunk]
	r    int // the writer's read offset
}

// chunkPools hold released chunks by size: minChunk << i.
var chunkPools [5]sync.Pool

func init() {
	for i := range chunkPools {
		size := minChunk << i
		chunkPools[i].New = func() any { return &chunk{buf: make([]byte, size)} }
	}
	if minChunk<<(len(chunkPools)-1) != maxChunk {
		panic("capture: chunk pools do not cover the chunk sizes")
	}
}

// poolOf returns the pool of chunks of size, or -1.
func poolOf(size int) int {
	for i := range chunkPools {
		if minChunk<<i == size {
			return i
		}
	}
	return -1
}

// Stream is one producer's buffer of records for a Writer (see above).
// Its methods but Close are for the producer's goroutine only.
type Stream struct {
	w *Writer

	// The producer's.
	cur   *chunk
	size  int         // the next chunk's size
	since int64       // when cur was taken (unix µs, of a record's time)
	stage []byte      // begun records: [4-byte length][body]...
	begun []begunCall // the begun records

	first  atomic.Pointer[chunk] // the stream's first chunk, for the writer
	closed atomic.Bool

	head *chunk // the writer's: the oldest chunk it has not released
}

type begunCall struct {
	at int   // offset in stage
	t  int64 // the call's time, unix µs
}

// NewStream returns a stream of records for w, registered with it (under
// a lock, once: a producer keeps its stream).
func (w *Writer) NewStream() *Stream {
	s := &Stream{w: w, size: minChunk}
	w.smu.Lock()
	w.added = append(w.added, s)
	w.smu.Unlock()
	return s
}

// Begin copies the call c with its arguments into the stream's staging
// buffer and returns its index for Finish. Its reply and latency come with
// Finish; a call begun but never finished before Publish is not recorded
// (its command never reached the upstream).
func (s *Stream) Begin(c *Call, args [][]byte) int {
	b := s.stage
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.AppendUvarint(b, c.Seq)
	t := c.Time.UnixMicro()
	b = binary.AppendVarint(b, t)
	b = binary.AppendUvarint(b, c.Conn)
	b = appendBytes(b, c.Queue)
	b = appendString(b, c.Script)
	b = appendString(b, c.Token)
	b = appendInts(b, c.Payload.Values)
	b = appendInts(b, c.Payload.Reply)
	if c.KeysSet {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(c.Name))
		b = appendInts(b, c.Keys)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(args)))
	for _, a := range args {
		b = appendBytes(b, a)
	}
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	s.stage = b
	s.begun = append(s.begun, begunCall{at, t})
	return len(s.begun) - 1
}

// Finish copies begun record i with its reply, which came at now, into the
// stream's chunk (visible to the writer at the next Publish). It returns
// false when the record was dropped: the writer stopped or closed, or the
// writer's buffers are full (Options.BufferBytes).
func (s *Stream) Finish(i int, reply []byte, now time.Time) bool {
	w := s.w
	if w.closed.Load() {
		return false
	}
	if w.stopped.Load() != nil {
		w.dropped.Add(1)
		w.c.DroppedMax.Add(1)
		return false
	}
	bc := s.begun[i]
	head := s.stage[bc.at+4 : bc.at+4+int(binary.LittleEndian.Uint32(s.stage[bc.at:]))]
	t := now.UnixMicro()
	lat := uint64(max(t-bc.t, 0))
	// [4-byte length][latency][head][reply]
	n := 4 + uvarintLen(lat) + len(head) + uvarintLen(uint64(len(reply))) + len(reply)
	c := s.cur
	if c == nil || len(c.buf)-c.w < n {
		if c = s.grow(n, t); c == nil {
			w.dropped.Add(1)
			w.c.DroppedFull.Add(1)
			return false
		}
	}
	b := c.buf[:c.w] // appends stay within buf: n bytes fit
	b = append(b, 0, 0, 0, 0)
	b = binary.AppendUvarint(b, lat)
	b = append(b, head...)
	b = appendBytes(b, reply)
	binary.LittleEndian.PutUint32(b[c.w:], uint32(len(b)-c.w-4))
	c.w = len(b)
	return true
}

// Publish makes the records finished since the last Publish visible to the
// writer, and forgets the begun ones.
func (s *Stream) Publish() {
	if c := s.cur; c != nil && c.n.Load() != int64(c.w) {
		c.n.Store(int64(c.w))
	}
	s.stage = s.stage[:0]
	s.begun = s.begun[:0]
	if cap(s.stage) > 4*maxChunk {
		s.stage = nil // a large command's copy is not kept
	}
}

// Close ends the stream: the writer takes what was published and forgets
// it. The producer must not use it afterwards; Close may be called from
// any goroutine once the producer is done with it.
func (s *Stream) Close() {
	s.closed.Store(true)
}

// grow leaves the current chunk for a new one with room for n bytes,
// taken at now (unix µs); nil when the writer's buffers are full.
func (s *Stream) grow(n int, now int64) *chunk {
	if s.cur != nil {
		switch took := time.Duration(now-s.since) * time.Microsecond; {
		case took < growWithin:
			s.size = min(2*s.size, maxChunk)
		case took > shrinkAfter:
			s.size = max(s.size/2, minChunk)
		}
	}
	size := max(s.size, n)
	w := s.w
	if w.buffered.Add(int64(size)) > w.o.BufferBytes {
		w.buffered.Add(-int64(size))
		return nil
	}
	var c *chunk
	if p := poolOf(size); p >= 0 {
		c = chunkPools[p].Get().(*chunk)
	} else {
		c = &chunk{buf: make([]byte, size)}
	}
	if old := s.cur; old == nil {
		s.first.Store(c)
	} else {
		old.n.Store(int64(old.w))
		old.next.Store(c)
	}
	s.cur, s.since = c, now
	return c
}

// release gives a chunk the writer is done with back (its producer has
// left it, or closed its stream; pool: to be reused).
func (w *Writer) release(c *chunk, pool bool) {
	w.buffered.Add(-int64(len(c.buf)))
	if p := poolOf(len(c.buf)); p >= 0 && pool {
		c.w, c.r = 0, 0
		c.n.Store(0)
		c.next.Store(nil)
		chunkPools[p].Put(c)
	}
}

// forgetStreams releases the chunks of the streams still open when the
// writer closes (after their last drain), not to the pool: a producer that
// has not seen the close yet may still write to its chunk.
func (w *Writer) forgetStreams() {
	for _, s := range w.streams {
		for c := s.head; c != nil; c = c.next.Load() {
			w.release(c, false)
		}
		s.head = nil
	}
	w.streams = nil
}

// drainStreams writes what every stream published since the last visit
// and forgets the closed ones. On the writer's goroutine.
func (w *Writer) drainStreams() {
	if h := w.o.beforeDrain; h != nil {
		h()
	}
	w.smu.Lock()
	w.streams = append(w.streams, w.added...)
	clear(w.added)
	w.added = w.added[:0]
	w.smu.Unlock()
	keep := w.streams[:0]
	for _, s := range w.streams {
		if !w.drain(s) {
			keep = append(keep, s)
		}
	}
	clear(w.streams[len(keep):])
	w.streams = keep
}

// drain writes what s published since the last visit; true when s is
// closed and all of it written.
func (w *Writer) drain(s *Stream) bool {
	closed := s.closed.Load() // first: what was published before Close is seen below
	if s.head == nil {
		if s.head = s.first.Load(); s.head == nil {
			return closed
		}
	}
	c := s.head
	for {
		next := c.next.Load() // before n: the producer stores n, then next
		if n := int(c.n.Load()); c.r < n {
			w.writeEntries(c.buf[c.r:n])
			c.r = n
		}
		if next == nil {
			break
		}
		w.release(c, true)
		c = next
	}
	s.head = c
	if closed {
		w.release(c, true)
		s.head = nil
		return true
	}
	return false
}

// writeEntries writes the records of a chunk's published bytes:
// [4-byte length][latency][the head and arguments, as Begin put them][reply].
func (w *Writer) writeEntries(b []byte) {
	for len(b) >= 4 {
		n := int(binary.LittleEndian.Uint32(b))
		e := b[4 : 4+n]
		b = b[4+n:]
		r := &w.rec
		if err := w.decodeEntry(r, e); err != nil {
			// Not reachable: the entry is what Finish wrote.
			w.stop("capture stopped: "+err.Error(), err)
		}
		w.write(r)
	}
}

// decodeEntry fills r (reused, its slices too) from an entry; r's slices
// alias e.
func (w *Writer) decodeEntry(r *Record, e []byte) error {
	d := decoder{b: e}
	r.Latency = time.Duration(d.uvarint("latency")) * time.Microsecond
	r.Seq = d.uvarint("sequence")
	r.Time = time.UnixMicro(d.varint("time"))
	r.Conn = d.uvarint("connection")
	r.Flags = 0
	r.Queue = w.intern(r.Queue, d.bytes("queue"))
	r.Script = w.intern(r.Script, d.bytes("script"))
	r.Token = w.intern(r.Token, d.bytes("token"))
	r.payload.Values = d.ints(r.payload.Values[:0])
	r.payload.Reply = d.ints(r.payload.Reply[:0])
	r.keysSet = d.byte1("keys") == 1
	r.name, r.keys = 0, r.keys[:0]
	if r.keysSet {
		r.name = int(d.uvarint("name"))
		r.keys = d.ints(r.keys)
	}
	n := d.uvarint("argument count")
	r.Args = r.Args[:0]
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.Args = append(r.Args, d.bytes("argument"))
	}
	r.Reply = d.bytes("reply")
	return d.err
}

// ints decodes a count and as many uvarints, appended to xs.
func (d *decoder) ints(xs []int) []int {
	n := d.uvarint("count")
	for i := uint64(0); i < n && d.err == nil; i++ {
		xs = append(xs, int(d.uvarint("position")))
	}
	return xs
}

// intern returns b as a string, the same one for the same bytes (queue,
// script and token names repeat from record to record); last is the
// field's previous value, the likeliest.
func (w *Writer) intern(last string, b []byte) string {
	if string(b) == last {
		return last
	}
	if s, ok := w.names[string(b)]; ok {
		return s
	}
	if len(w.names) >= 1<<12 {
		clear(w.names)
	}
	s := string(b)
	w.names[s] = s
	return s
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendInts(b []byte, xs []int) []byte {
	b = binary.AppendUvarint(b, uint64(len(xs)))
	for _, x := range xs {
		b = binary.AppendUvarint(b, uint64(max(x, 0)))
	}
	return b
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
