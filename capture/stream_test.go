package capture

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/shamap"
)

// callOf is the head of r, as a producer gives it to a stream.
func callOf(r *Record) *Call {
	return &Call{Seq: r.Seq, Time: r.Time, Conn: r.Conn, Queue: []byte(r.Queue), Script: r.Script, Token: r.Token,
		Payload: r.payload, KeysSet: r.keysSet, Name: r.name, Keys: r.keys}
}

// stream adds r to st as a proxy session does: begun, finished with its
// reply, published.
func stream(st *Stream, r *Record) bool {
	i := st.Begin(callOf(r), r.Args)
	ok := st.Finish(i, r.Reply, r.Time.Add(r.Latency))
	st.Publish()
	return ok
}

func sameRecord(t *testing.T, got, want *Record) {
	t.Helper()
	if got.Seq != want.Seq || !got.Time.Equal(want.Time) || got.Latency != want.Latency || got.Conn != want.Conn ||
		got.Flags != want.Flags || got.Queue != want.Queue || got.Script != want.Script || got.Token != want.Token ||
		!bytes.Equal(bytes.Join(got.Args, []byte{0}), bytes.Join(want.Args, []byte{0})) || !bytes.Equal(got.Reply, want.Reply) {
		t.Errorf("record %d:\n got %+v\nwant %+v", want.Seq, got, want)
	}
}

// Records handed over through streams are written as Add writes them: the
// same bodies, each stream's in the order it published them, and a record
// begun but not finished (its command never left) is not written.
func TestStreamsWriteWhatAddWrites(t *testing.T) {
	var want []*Record
	for i := range 300 {
		r := enqueueRecord(uint64(i+1), fmt.Sprintf("J%d", i), strings.Repeat("p", i*7))
		r.Conn = uint64(1 + i%3)
		want = append(want, r)
	}
	// A plain command with its key positions.
	get := &Record{Seq: 301, Time: time.UnixMicro(1_700_000_000_000_900), Latency: 5 * time.Microsecond, Conn: 1, Queue: "q",
		Args: args("HGET", "emq:{q}:job:J1", "payload"), Reply: []byte("$3\r\nabc\r\n")}
	get.SetKeys(1, []int{1})
	want = append(want, get)

	dir := t.TempDir()
	w, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	streams := []*Stream{w.NewStream(), w.NewStream(), w.NewStream()}
	for _, r := range want {
		st := streams[(r.Conn-1)%3]
		// A record begun and dropped before the publish: not written.
		st.Begin(callOf(r), args("EVALSHA", "never", "0"))
		i := st.Begin(callOf(r), r.Args)
		if !st.Finish(i, r.Reply, r.Time.Add(r.Latency)) {
			t.Fatalf("record %d dropped", r.Seq)
		}
		st.Publish()
		if r.Seq == 150 {
			streams[2].Close() // a closed stream's records are written all the same
			streams[2] = w.NewStream()
		}
	}
	if err := w.Close(); err != nil { // no wait: Close writes what was published
		t.Fatal(err)
	}
	files, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := files[0].Records
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	last := map[uint64]uint64{}
	bySeq := map[uint64]*Record{}
	for i := range got {
		r := &got[i]
		if r.Seq <= last[r.Conn] {
			t.Errorf("connection %d: record %d after %d", r.Conn, r.Seq, last[r.Conn])
		}
		last[r.Conn] = r.Seq
		bySeq[r.Seq] = r
	}
	for _, r := range want {
		if g := bySeq[r.Seq]; g == nil {
			t.Errorf("record %d missing", r.Seq)
		} else {
			sameRecord(t, g, r)
		}
	}
	if st := w.Stats(); st.Records != int64(len(want)) || st.Dropped != 0 {
		t.Errorf("stats %+v", st)
	}
	if n := w.buffered.Load(); n != 0 {
		t.Errorf("%d bytes of chunks still counted after Close", n)
	}
}

// Redaction is the same through a stream as through Add.
func TestStreamRedactsAsAdd(t *testing.T) {
	claim := &Record{Seq: 2, Time: time.UnixMicro(1_700_000_000_000_002), Queue: "q", Script: "claim2", Token: "CLAIM",
		Args:  args("EVALSHA", "007d636ab0ba715dff227dd5bb8ea895fef9ac9e", "2", "emq:{q}:pending", "emq:{q}:active", "30000"),
		Reply: []byte("*3\r\n$2\r\nJ1\r\n$13\r\nsecret-stuff!\r\n:1\r\n")}
	claim.SetPayload((&shamap.Script{Verb: "CLAIM"}).Payload())
	recs := []*Record{enqueueRecord(1, "J1", "secret-stuff!"), claim}
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, Redact: true})
	if err != nil {
		t.Fatal(err)
	}
	st := w.NewStream()
	for _, r := range recs {
		stream(st, r)
	}
	st.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := files[0].Records
	if len(got) != 2 || !got[0].Redacted() || !got[1].Redacted() {
		t.Fatalf("records %+v", got)
	}
	if bytes.Contains(got[0].Args[6], []byte("secret")) {
		t.Errorf("payload kept: %q", got[0].Args[6])
	}
	v, err := resp.Parse(got[1].Reply)
	if err != nil || len(v.Elems) != 3 || !bytes.Equal(v.Elems[1].Str, got[0].Args[6]) || string(v.Elems[0].Str) != "J1" {
		t.Errorf("claim reply %q (%v), enqueue payload %q: the stand-ins should agree", got[1].Reply, err, got[0].Args[6])
	}
}

// When the writer falls behind (here: it is held), the streams' chunks
// stop at Options.BufferBytes: a record that finds no room is dropped and
// counted at once, the producer never waits, and once the writer goes on
// it writes every record it was handed, in order.
func TestStreamBoundedWhenWriterFallsBehind(t *testing.T) {
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	beforeDrain := func() {
		select {
		case held <- struct{}{}:
		default:
		}
		<-hold
	}
	const bound = 256 << 10
	c := new(Counters)
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, BufferBytes: bound, Counters: c, beforeDrain: beforeDrain})
	if err != nil {
		t.Fatal(err)
	}
	<-held // the writer waits in its first visit of the streams
	st := w.NewStream()
	payload := strings.Repeat("w", 1000)
	start := time.Now()
	const n = 5000
	kept := 0
	for i := range n {
		if stream(st, enqueueRecord(uint64(i+1), "J", payload)) {
			kept++
		}
		if b := w.buffered.Load(); b > bound {
			t.Fatalf("%d bytes of chunks, bound %d", b, bound)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d records took %v with the writer held", n, d)
	}
	if kept == 0 || kept == n || c.DroppedFull.Load() != int64(n-kept) {
		t.Errorf("kept %d of %d, dropped %d", kept, n, c.DroppedFull.Load())
	}
	close(hold)
	st.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := files[0].Records
	if len(got) != kept || c.Records.Load() != int64(kept) {
		t.Fatalf("%d records written (counted %d), %d kept", len(got), c.Records.Load(), kept)
	}
	for i := range got { // the records before the bound, in order
		if got[i].Seq != uint64(i+1) {
			t.Fatalf("record %d has sequence %d", i, got[i].Seq)
		}
	}
	if st := w.Stats(); st.Dropped != int64(n-kept) {
		t.Errorf("stats %+v", st)
	}
	if b := w.buffered.Load(); b != 0 {
		t.Errorf("%d bytes of chunks counted after Close", b)
	}
}

// A stream's records after its writer stopped (max_bytes) are dropped and
// counted, and after Close are refused.
func TestStreamAfterStopAndClose(t *testing.T) {
	c := new(Counters)
	w, err := Open(Options{Dir: t.TempDir(), MaxBytes: 2000, Counters: c})
	if err != nil {
		t.Fatal(err)
	}
	st := w.NewStream()
	for i := range 100 {
		stream(st, enqueueRecord(uint64(i+1), "J", strings.Repeat("z", 50)))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s := w.Stats()
	if s.Records == 0 || s.Records+s.Dropped != 100 || s.Stopped == "" || c.DroppedMax.Load() != s.Dropped {
		t.Errorf("stats %+v, dropped for max_bytes %d", s, c.DroppedMax.Load())
	}
	if stream(st, enqueueRecord(101, "J", "z")) {
		t.Error("a record was taken after Close")
	}
}

// processCPU is the processor time the process has used (all threads):
// steadier than wall time on a machine shared with other work.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStream is the whole cost of a recorded call on one processor,
// as a proxy running with GOMAXPROCS 1 pays it: the producer's copy and the
// writer's work (redaction, encoding, checksum, the file's writes), for the
// job mix's calls (an ENQUEUE with a 64-byte payload, a CLAIM returning it,
// a COMPLETE). "producer-ns/op" is the producer's share.
func BenchmarkStream(b *testing.B) {
	for _, redact := range []bool{false, true} {
		b.Run(fmt.Sprintf("redact=%v", redact), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			payload := strings.Repeat("p", 64)
			enq := enqueueRecord(1, "J1234567", payload)
			claim := &Record{Queue: "q", Script: "claim2", Token: "CLAIM",
				Args:  args("EVALSHA", "007d636ab0ba715dff227dd5bb8ea895fef9ac9e", "2", "emq:{q}:pending", "emq:{q}:active", "30000"),
				Reply: []byte("*3\r\n$8\r\nJ1234567\r\n$64\r\n" + payload + "\r\n:1\r\n")}
			claim.SetPayload((&shamap.Script{Verb: "CLAIM"}).Payload())
			done := &Record{Queue: "q", Script: "complete", Token: "COMPLETE",
				Args:  args("EVALSHA", "2d3f0b3b4a0e6f4c2f0e7b2b9b6f6f1a3c3d2e1f", "3", "emq:{q}:active", "emq:{q}:job:J1234567", "emq:{q}:done", "J1234567"),
				Reply: []byte(":1\r\n")}
			recs := []*Record{enq, claim, done}
			w, err := Open(Options{Dir: b.TempDir(), Redact: redact, BufferBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			st := w.NewStream()
			now := time.Now()
			var prod time.Duration
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				r := recs[i%3]
				r.Seq, r.Time = uint64(i+1), now
				t0 := time.Now()
				st.Begin(callOf(r), r.Args)
				if i%16 == 15 || i == b.N-1 {
					for j := range len(st.begun) {
						st.Finish(j, recs[(i-len(st.begun)+1+j)%3].Reply, now)
					}
					st.Publish()
					prod += time.Since(t0)
					runtime.Gosched() // as a session waits for its next read
					continue
				}
				prod += time.Since(t0)
			}
			st.Close()
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(prod.Nanoseconds())/float64(b.N), "producer-ns/op")
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if s := w.Stats(); s.Records != int64(b.N) {
				b.Fatalf("stats %+v, want %d records", s, b.N)
			}
		})
	}
}
