package conn

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/emqproxy/emqproxy/proxy/limits"
	"github.com/emqproxy/emqproxy/resp"
)

// pair returns a Conn over one end of a net.Pipe, the client's end, and
// the budget it takes from.
func pair(t *testing.T, budget, maxQuery int64) (*Conn, net.Conn, *limits.Budget) {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	mem := limits.NewBudget(budget)
	c := New(server, Options{ID: 1, Mem: mem, MaxQueryBuffer: maxQuery,
		Limits:       resp.Limits{MaxMultibulk: 1024, MaxBulk: 1 << 30, MaxInline: 64 * 1024},
		WriteTimeout: 100 * time.Millisecond,
		BytesIn:      prometheus.NewCounter(prometheus.CounterOpts{Name: "in"}),
		BytesOut:     prometheus.NewCounter(prometheus.CounterOpts{Name: "out"})})
	return c, client, mem
}

// send writes b to the client's end in a goroutine; the returned channel
// gets the write's error.
func send(w net.Conn, b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(b)
		done <- err
	}()
	return done
}

// set is a SET command whose value is n bytes.
func set(n int) []byte {
	v := bytes.Repeat([]byte{'v'}, n)
	return []byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + strconv.Itoa(n) + "\r\n" + string(v) + "\r\n")
}

// frame reads until the next command is framed, as a session's loop does.
func frame(t *testing.T, c *Conn) resp.Frame {
	t.Helper()
	for {
		f, status, errReply := c.Next()
		switch status {
		case resp.Framed:
			return f
		case resp.Invalid:
			t.Fatalf("invalid: %q", errReply)
		}
		if err := c.Room(false); err != nil {
			t.Fatal(err)
		}
		if err := c.Fill(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestBufferGrowsToWhatACommandNeedsAndShrinksBack(t *testing.T) {
	c, client, mem := pair(t, 1<<20, 1<<20)
	cmd := set(200 * 1024)
	done := send(client, cmd)
	f := frame(t, c)
	if !bytes.Equal(f.Raw, cmd) {
		t.Fatalf("framed %d bytes, want the %d sent", len(f.Raw), len(cmd))
	}
	if len(c.buf) != len(cmd) {
		t.Fatalf("buffer %d bytes, want grown to the command's %d at once", len(c.buf), len(cmd))
	}
	if used, _ := mem.InUse(); used != int64(len(cmd)-keptReadBuf) {
		t.Fatalf("budget holds %d, want the bytes past keptReadBuf (%d)", used, len(cmd)-keptReadBuf)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, status, _ := c.Next(); status != resp.Incomplete {
		t.Fatalf("status %v after the command, want incomplete", status)
	}
	if err := c.Room(false); err != nil {
		t.Fatal(err)
	}
	// Shrunk back to the initial size, then doubled as for a pipeline:
	// the command's last read filled the buffer.
	if len(c.buf) != 2*InitialReadBuf {
		t.Fatalf("buffer %d bytes after the command, want shrunk back (and doubled: %d)", len(c.buf), 2*InitialReadBuf)
	}
	if used, _ := mem.InUse(); used != 0 {
		t.Fatalf("budget holds %d after the shrink, want 0", used)
	}
	if got := counter(t, c.opt.BytesIn); got != float64(len(cmd)) {
		t.Fatalf("bytes in %v, want %d", got, len(cmd))
	}
}

func TestBufferDoublesForPipelinesAndShrinksAfterSmallReads(t *testing.T) {
	c, client, _ := pair(t, 1<<20, 1<<20)
	// A read that fills the buffer doubles it for the next one.
	one := []byte("*1\r\n$1011\r\n" + string(bytes.Repeat([]byte{'x'}, 1011)) + "\r\n") // 1 KiB
	pipeline := bytes.Repeat(one, InitialReadBuf/len(one))
	done := send(client, pipeline)
	if err := c.Room(false); err != nil {
		t.Fatal(err)
	}
	if err := c.Fill(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for {
		if _, status, _ := c.Next(); status != resp.Framed {
			break
		}
	}
	if err := c.Room(false); err != nil {
		t.Fatal(err)
	}
	if len(c.buf) != 2*InitialReadBuf {
		t.Fatalf("buffer %d bytes after a full read, want doubled to %d", len(c.buf), 2*InitialReadBuf)
	}
	// Small reads in a row make it shrink back once it is empty.
	small := []byte("*1\r\n$4\r\nPING\r\n")
	for i := range shrinkAfter {
		if len(c.buf) != 2*InitialReadBuf {
			t.Fatalf("buffer shrunk after %d small reads, want after %d", i, shrinkAfter)
		}
		done := send(client, small)
		frame(t, c)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c.Reset()
	}
	if _, status, _ := c.Next(); status != resp.Incomplete {
		t.Fatalf("status %v, want incomplete", status)
	}
	if err := c.Room(false); err != nil {
		t.Fatal(err)
	}
	if len(c.buf) != InitialReadBuf {
		t.Fatalf("buffer %d bytes after %d small reads, want %d", len(c.buf), shrinkAfter, InitialReadBuf)
	}
}

func TestQueryBufferLimit(t *testing.T) {
	c, client, _ := pair(t, 1<<20, 2*InitialReadBuf)
	go func() { _, _ = client.Write(set(4 * InitialReadBuf)) }()
	var err error
	for err == nil {
		c.Next()
		if err = c.Room(false); err == nil {
			err = c.Fill(time.Now().Add(5 * time.Second))
		}
	}
	var qb *QueryBufferError
	if !errors.As(err, &qb) || qb.Bytes != 2*InitialReadBuf {
		t.Fatalf("err %v, want a QueryBufferError at %d bytes", err, 2*InitialReadBuf)
	}
}

func TestCommandLargerThanTheBudget(t *testing.T) {
	c, client, mem := pair(t, 1024, 1<<20)
	cmd := set(200 * 1024)
	go func() { _, _ = client.Write(cmd) }()
	var err error
	for err == nil {
		c.Next()
		if err = c.Room(false); err == nil {
			err = c.Fill(time.Now().Add(5 * time.Second))
		}
	}
	var big *TooLargeError
	if !errors.As(err, &big) || big.Need != len(cmd) || big.Budget != 1024 {
		t.Fatalf("err %v, want a TooLargeError for %d bytes over a budget of 1024", err, len(cmd))
	}
	if used, _ := mem.InUse(); used != 0 {
		t.Fatalf("budget holds %d, want 0", used)
	}
}

func TestStopReadKeepsWhatTheReadBrought(t *testing.T) {
	c, client, _ := pair(t, 1<<20, 1<<20)
	// A read with nothing to read is stopped without an error.
	c.ReadAsync()
	if !c.Reading() {
		t.Fatal("no read out after ReadAsync")
	}
	if err := c.StopRead(); err != nil {
		t.Fatalf("StopRead: %v", err)
	}
	if c.Reading() {
		t.Fatal("a read out after StopRead")
	}
	// One that got bytes keeps them for the next round.
	c.ReadAsync()
	cmd := []byte("*1\r\n$4\r\nPING\r\n")
	if err := <-send(client, cmd); err != nil {
		t.Fatal(err)
	}
	if err := c.StopRead(); err != nil {
		t.Fatalf("StopRead: %v", err)
	}
	f, status, _ := c.Next()
	if status != resp.Framed || !bytes.Equal(f.Raw, cmd) {
		t.Fatalf("after StopRead: status %v, %q; want %q framed", status, f.Raw, cmd)
	}
	// A read whose client is gone reports it on Reads.
	c.ReadAsync()
	_ = client.Close()
	if err := c.ReadDone(<-c.Reads()); err == nil {
		t.Fatal("ReadDone: no error for a closed client")
	}
}

func TestWriteUnderTheWriteTimeout(t *testing.T) {
	c, client, _ := pair(t, 1<<20, 1<<20)
	c.Out = append(c.Out, "+OK\r\n"...)
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, 16)
		n, _ := client.Read(b)
		got <- b[:n]
	}()
	if _, err := c.Write(); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if b := <-got; string(b) != "+OK\r\n" {
		t.Fatalf("client read %q", b)
	}
	if len(c.Out) != 0 {
		t.Fatalf("output %q after the write, want empty", c.Out)
	}
	// A client that does not read: the write times out.
	c.Out = append(c.Out, "+OK\r\n"...)
	began := time.Now()
	_, err := c.Write()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write to a client that does not read: %v, want a deadline error", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the write took %v under a timeout of %v", took, c.opt.WriteTimeout)
	}
	if got := counter(t, c.opt.BytesOut); got != 5 {
		t.Fatalf("bytes out %v, want 5", got)
	}
}

func TestOutputHeldOfTheBudget(t *testing.T) {
	c, _, mem := pair(t, 1<<20, 1<<20)
	c.Out = append(c.Out, make([]byte, resp.FreeReplyBytes+100)...)
	c.HoldOutput()
	if used, _ := mem.InUse(); used != 100 {
		t.Fatalf("budget holds %d, want the 100 bytes past the free ones", used)
	}
	mem.Force(50) // a batch's replies, adopted as the output
	spare := c.Adopt(make([]byte, 10), 50)
	if len(spare) != 0 || len(c.Out) != 10 {
		t.Fatalf("Adopt: spare %d bytes, output %d; want 0 and 10", len(spare), len(c.Out))
	}
	mem.Force(7) // the session's own
	c.ReleaseOutput(7)
	if used, _ := mem.InUse(); used != 0 {
		t.Fatalf("budget holds %d after ReleaseOutput, want 0", used)
	}
}
