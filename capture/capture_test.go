package capture

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/shamap"
)

func args(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func enqueueRecord(seq uint64, id, payload string) *Record {
	r := &Record{
		Seq: seq, Time: time.UnixMicro(1_700_000_000_000_000 + int64(seq)), Latency: 120 * time.Microsecond,
		Conn: 7, Queue: "q", Script: "enqueue", Token: "ENQUEUE",
		Args:  args("EVALSHA", "7750f40b44bcdd7e0eaa5a8f2c66391ecbcde7f8", "2", "emq:{q}:job:"+id, "emq:{q}:pending", id, payload),
		Reply: []byte(":1\r\n"),
	}
	r.SetPayload((&shamap.Script{Verb: "ENQUEUE"}).Payload())
	return r
}

// write writes n records with w's options and returns the capture's files.
func write(t *testing.T, o Options, recs ...*Record) []*File {
	t.Helper()
	w, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if !w.Add(r) {
			t.Fatalf("record %d dropped", r.Seq)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := Read(o.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	var recs []*Record
	for i := range 100 {
		recs = append(recs, enqueueRecord(uint64(i+1), fmt.Sprintf("J%d", i), "p\x00\r\n"+strings.Repeat("x", i)))
	}
	want := make([][]byte, len(recs))
	for i, r := range recs {
		want[i] = r.AppendBinary(nil)
	}
	files := write(t, Options{Dir: dir, MapDigest: "abc", Queues: []string{"q*"}}, recs...)
	if len(files) != 1 || files[0].Cut != nil {
		t.Fatalf("files %d, cut %v", len(files), files[0].Cut)
	}
	h := files[0].Header
	if h.Format != Version || h.MapDigest != "abc" || h.Redacted || h.File != 1 || h.Queues[0] != "q*" {
		t.Errorf("header %+v", h)
	}
	if len(files[0].Records) != len(recs) {
		t.Fatalf("%d records, want %d", len(files[0].Records), len(recs))
	}
	for i, r := range files[0].Records {
		if got := r.AppendBinary(nil); !bytes.Equal(got, want[i]) {
			t.Fatalf("record %d differs after the round trip", i+1)
		}
	}
	if r := files[0].Records[5]; r.Time.UnixMicro() != 1_700_000_000_000_006 || r.Latency != 120*time.Microsecond || r.Token != "ENQUEUE" {
		t.Errorf("record 6: %+v", r)
	}
}

func TestRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	var recs []*Record
	for i := range 200 {
		recs = append(recs, enqueueRecord(uint64(i+1), fmt.Sprintf("J%d", i), strings.Repeat("y", 100)))
	}
	files := write(t, Options{Dir: dir, FileBytes: 4096}, recs...)
	if len(files) < 5 {
		t.Fatalf("%d files, want several", len(files))
	}
	seq := uint64(0)
	for i, f := range files {
		if f.Header.File != i+1 {
			t.Errorf("file %d header says %d", i+1, f.Header.File)
		}
		st, _ := os.Stat(f.Path)
		if st.Size() > 4096 {
			t.Errorf("%s is %d bytes, over 4096", f.Path, st.Size())
		}
		for _, r := range f.Records {
			seq++
			if r.Seq != seq {
				t.Fatalf("record seq %d, want %d", r.Seq, seq)
			}
		}
	}
	if seq != 200 {
		t.Errorf("%d records read, want 200", seq)
	}
}

func TestStopsAtMaxBytes(t *testing.T) {
	dir := t.TempDir()
	var logged []string
	c := new(Counters)
	w, err := Open(Options{Dir: dir, MaxBytes: 2000, Counters: c, Log: func(msg string, _ error) { logged = append(logged, msg) }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		w.Add(enqueueRecord(uint64(i+1), "J", strings.Repeat("z", 50)))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Bytes > 2000 || st.Records == 0 || st.Records+st.Dropped != 100 || st.Stopped == "" {
		t.Errorf("stats %+v", st)
	}
	if c.DroppedMax.Load() != st.Dropped || c.Records.Load() != st.Records {
		t.Errorf("counters: dropped %d records %d; stats %+v", c.DroppedMax.Load(), c.Records.Load(), st)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "max_bytes") {
		t.Errorf("logged %q, want one max_bytes line", logged)
	}
	files, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(files[0].Records)) != st.Records {
		t.Errorf("%d records in the file, stats say %d", len(files[0].Records), st.Records)
	}
}

// Add never waits: with the writer's queue full it drops and counts.
func TestFullQueueDropsWithoutBlocking(t *testing.T) {
	c := new(Counters)
	w, err := Open(Options{Dir: t.TempDir(), QueueLen: 1, Counters: c})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 10000 {
		w.Add(enqueueRecord(uint64(i+1), "J", strings.Repeat("w", 1000)))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("10000 Adds took %v", d)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if c.DroppedFull.Load() == 0 || c.DroppedFull.Load()+c.Records.Load() != 10000 {
		t.Errorf("dropped %d, written %d", c.DroppedFull.Load(), c.Records.Load())
	}
}

// A file cut anywhere inside its last record reads as every record before
// it, with the cut reported; a zero-filled tail likewise.
func TestCutLastRecordIsSkipped(t *testing.T) {
	dir := t.TempDir()
	files := write(t, Options{Dir: dir}, enqueueRecord(1, "J1", "a"), enqueueRecord(2, "J2", "b"), enqueueRecord(3, "J3", "c"))
	data, err := os.ReadFile(files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	last := len(data) - (frameHead + len(enqueueRecord(3, "J3", "c").AppendBinary(nil)))
	for cut := last; cut < len(data); cut++ {
		p := filepath.Join(t.TempDir(), "cut"+Ext)
		if err := os.WriteFile(p, data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := ReadFile(p)
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		if cut == last {
			if f.Cut != nil || len(f.Records) != 2 {
				t.Fatalf("cut at a frame boundary: %d records, cut %v", len(f.Records), f.Cut)
			}
			continue
		}
		if len(f.Records) != 2 || f.Cut == nil || f.Cut.Offset != int64(last) || f.Cut.Record != 3 {
			t.Fatalf("cut at %d: %d records, cut %v", cut, len(f.Records), f.Cut)
		}
	}
	zeroTail := append(append([]byte{}, data[:last]...), make([]byte, 4096)...)
	p := filepath.Join(t.TempDir(), "zeros"+Ext)
	if err := os.WriteFile(p, zeroTail, 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadFile(p); err != nil || len(f.Records) != 2 || f.Cut == nil {
		t.Fatalf("zero tail: %v, %v", err, f)
	}
}

func TestBadInputNamesFileAndOffset(t *testing.T) {
	dir := t.TempDir()
	files := write(t, Options{Dir: dir}, enqueueRecord(1, "J1", "a"), enqueueRecord(2, "J2", "b"), enqueueRecord(3, "J3", "c"))
	data, _ := os.ReadFile(files[0].Path)
	second := len(fileHead())
	for range 2 { // skip the header frame and record 1
		second += frameHead + int(uint32(data[second])<<24|uint32(data[second+1])<<16|uint32(data[second+2])<<8|uint32(data[second+3]))
	}
	corrupt := append([]byte{}, data...)
	corrupt[second+frameHead+3] ^= 0xff
	versioned := append([]byte{}, data...)
	versioned[len(Magic)+1] = 9
	for _, tc := range []struct {
		name string
		data []byte
		want error
		text string
	}{
		{"foreign", []byte("*1\r\n$4\r\nPING\r\n"), ErrForeign, "offset 0"},
		{"version", versioned, ErrVersion, "format version 9"},
		{"checksum", corrupt, ErrCorrupt, fmt.Sprintf("offset %d (record 2)", second)},
		{"zero length", append(append([]byte{}, data[:second]...), 0, 0, 0, 0, 0, 0, 0, 0, 1), ErrCorrupt, "record 2"},
	} {
		p := filepath.Join(t.TempDir(), tc.name+Ext)
		if err := os.WriteFile(p, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(p)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v; want %v naming %s and %q", tc.name, err, tc.want, p, tc.text)
		}
	}
	if _, err := Read(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no "+Ext) {
		t.Errorf("empty directory: %v", err)
	}
}

// MaxBytes is one budget over the directory: a second writer counts the
// files of the first (and of any earlier run), the two together stay under
// it, and a writer opened with the budget spent is refused.
func TestBudgetSharedAcrossWriters(t *testing.T) {
	dir := t.TempDir()
	const budget = 8000
	add := func() Stats {
		t.Helper()
		w, err := Open(Options{Dir: dir, MaxBytes: budget})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			w.Add(enqueueRecord(uint64(i+1), "J", strings.Repeat("z", 100)))
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return w.Stats()
	}
	first := add()
	if first.EarlierBytes != 0 || first.Records == 0 || first.Stopped != "" {
		t.Fatalf("first capture %+v", first)
	}
	// A foreign file in the directory is not a capture file: not counted.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), make([]byte, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	second := add()
	if second.EarlierBytes != first.Bytes || second.Stopped == "" || second.Records == 0 {
		t.Fatalf("second capture %+v, first wrote %d bytes", second, first.Bytes)
	}
	onDisk, err := DirBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk != first.Bytes+second.Bytes || onDisk > budget {
		t.Errorf("%d bytes of capture files on disk (first %d, second %d), budget %d", onDisk, first.Bytes, second.Bytes, budget)
	}
	if _, err := Open(Options{Dir: dir, MaxBytes: budget}); !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), dir) {
		t.Errorf("open with the budget spent: %v", err)
	}
	// Removing the old captures gives the budget back.
	files, _ := filepath.Glob(filepath.Join(dir, "*"+Ext))
	for _, f := range files {
		_ = os.Remove(f)
	}
	if third := add(); third.EarlierBytes != 0 || third.Records != first.Records {
		t.Errorf("after the old captures were removed: %+v", third)
	}
}
