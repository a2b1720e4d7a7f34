package pipe

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The pipe under load while a fault strikes: loadWorkers goroutines each
// send loadBatches batches of 1 to 6 `INCR ctr` on one pipe, each waiting
// for its batch before the next (as sessions do), and worker 0 injects the
// fault once its batch loadFaultAt is complete. Whatever the fault, every
// batch completes, and checkLoad holds:
//
//   - every reply is the server's (`:N`), the lost error (written, "may have
//     been applied") or the unavailable error (never written);
//   - the server's replies are exactly 1..R, each once (none lost, none
//     given to another batch: the order holds across the pipe), increasing
//     within each worker and consecutive within a batch, and no worker
//     gets one after an error (the pipe is dead once it fails);
//   - the server ran ctr INCRs (INFO commandstats agrees) with
//     R <= ctr <= R + lost: nothing was resent, nothing unsent reached it.
const (
	loadWorkers = 16
	loadBatches = 40
	loadFaultAt = 10
)

// runLoad runs the load on p, with fault (nil: none) called by worker 0
// after its batch loadFaultAt. It returns each worker's batches' replies,
// and when the fault returned.
func runLoad(t *testing.T, p *Pipe, fault func()) (res [][][][]byte, faulted time.Time) {
	t.Helper()
	res = make([][][][]byte, loadWorkers)
	var wg sync.WaitGroup
	for w := range loadWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 23))
			b := NewBatch()
			for k := range loadBatches {
				b.Reset()
				b.N, b.Max = 1+rng.IntN(6), 1<<20
				for range b.N {
					b.Out = resp.AppendCommand(b.Out, "INCR", "ctr")
				}
				if err := p.Send(b); err != nil {
					b.Fill(UnavailableReply(p.name, err.Error()))
				} else {
					p.Await(b)
				}
				replies := make([][]byte, len(b.Ends))
				for i := range replies {
					replies[i] = slices.Clone(b.Reply(i))
				}
				res[w] = append(res[w], replies)
				if w == 0 && k == loadFaultAt && fault != nil {
					fault()
					faulted = time.Now()
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	finishes(t, "the load", done)
	return res, faulted
}

// checkLoad checks a load's replies (see above) and returns how many
// commands got the server's reply, the lost error and the unavailable one.
func checkLoad(t *testing.T, p *Pipe, n *node.Node, res [][][][]byte) (real, lost, unsent int64) {
	t.Helper()
	unavailable := []byte("-UPSTREAM " + p.name + " unavailable: ")
	var vals []int64
	for w, batches := range res {
		last, failed := int64(0), false
		for k, replies := range batches {
			if len(replies) == 0 {
				t.Errorf("worker %d batch %d: no replies", w, k)
			}
			for i, r := range replies {
				switch {
				case len(r) > 3 && r[0] == ':':
					v, err := strconv.ParseInt(string(r[1:len(r)-2]), 10, 64)
					if err != nil {
						t.Errorf("worker %d batch %d reply %d: %q", w, k, i, r)
						continue
					}
					if failed || v <= last || (i > 0 && v != last+1) {
						t.Errorf("worker %d batch %d reply %d: %d after %d (failed before: %v)", w, k, i, v, last, failed)
					}
					last = v
					vals = append(vals, v)
					real++
				case bytes.Equal(r, p.lostMsg):
					lost++
					failed = true
				case bytes.HasPrefix(r, unavailable):
					unsent++
					failed = true
				default:
					t.Errorf("worker %d batch %d reply %d: %q is neither the server's nor the proxy's error", w, k, i, r)
				}
			}
		}
	}
	slices.Sort(vals)
	for i, v := range vals {
		if v != int64(i+1) {
			t.Fatalf("the server's replies are not 1..%d: %d at %d", len(vals), v, i)
		}
	}
	if p.Failed() == nil {
		p.Close() // a load with no fault: the server counts once it is gone
	}
	waitDead(t, p)
	ctr, incrs := serverCounter(t, n)
	if ctr < real || ctr > real+lost || incrs != ctr {
		t.Errorf("the server ran %d INCRs (ctr %d): want ctr from %d (replies) to %d (replies + lost)", incrs, ctr, real, real+lost)
	}
	t.Logf("%d replies, %d lost, %d never written", real, lost, unsent)
	return real, lost, unsent
}

// TestPipeFaultsUnderLoad runs the load through each fault, on a shared
// connection (inline roles) and on a dedicated one (the reader goroutine).
func TestPipeFaultsUnderLoad(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testPipeFaultsUnderLoad)
}

func testPipeFaultsUnderLoad(t *testing.T, srv node.Server) {
	const stall = 300 * time.Millisecond
	type env struct {
		n  *node.Node
		p  *Pipe
		fc *faultConn
		id string // the pipe's CLIENT ID
	}
	cases := []struct {
		name    string
		timeout time.Duration
		fault   func(t *testing.T, e *env) // nil: none
		want    error                      // what p.failed() wraps; nil: it must not fail
	}{
		{name: "none"},
		{name: "write error", fault: func(t *testing.T, e *env) { e.fc.failWrite.Store(true) }, want: errInjected},
		{name: "read error", fault: func(t *testing.T, e *env) { e.fc.failRead.Store(true) }, want: errInjected},
		{name: "client kill", fault: func(t *testing.T, e *env) {
			if r, err := node.RawDo(e.n.Addr, "CLIENT", "KILL", "ID", e.id); err != nil || string(r) != ":1\r\n" {
				t.Errorf("CLIENT KILL ID %s: %q %v", e.id, r, err)
			}
		}, want: ErrLost},
		{name: "stalled server", timeout: stall, fault: func(t *testing.T, e *env) { node.FreezeT(t, e.n) }, want: ErrTimeout},
		{name: "close", fault: func(t *testing.T, e *env) { e.p.Close() }, want: net.ErrClosed},
	}
	for _, tc := range cases {
		for _, bg := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/bg=%v", tc.name, bg), func(t *testing.T) {
				e := &env{n: pipeNode(t, srv), fc: &faultConn{}}
				e.p = dialPipe(t, e.n.Addr, e.fc, tc.timeout, bg)
				id := NewBatch()
				id.Out, id.N, id.Max = resp.AppendCommand(nil, "CLIENT", "ID"), 1, 1<<10
				if err := e.p.Send(id); err != nil {
					t.Fatal(err)
				}
				e.p.Await(id)
				e.id = strings.TrimSpace(strings.TrimPrefix(string(id.Reply(0)), ":"))

				var fault func()
				if tc.fault != nil {
					fault = func() { tc.fault(t, e) }
				}
				res, faulted := runLoad(t, e.p, fault)
				took := time.Since(faulted)
				if tc.timeout > 0 {
					if err := e.n.Thaw(); err != nil {
						t.Fatal(err)
					}
				}
				if err := e.p.Failed(); !errors.Is(err, tc.want) {
					t.Errorf("failed() = %v, want %v", err, tc.want)
				}
				real, lost, unsent := checkLoad(t, e.p, e.n, res)
				switch {
				case tc.want == nil && (lost > 0 || unsent > 0):
					t.Errorf("no fault, yet %d lost and %d never written", lost, unsent)
				case tc.want != nil && lost+unsent == 0:
					t.Error("the fault answered no command with an error")
				case tc.want != nil && real == 0:
					t.Error("no command was answered before the fault")
				}
				if tc.timeout > 0 && lost == 0 {
					t.Error("no command waited on the stalled server")
				}
				if tc.timeout > 0 && took > tc.timeout+5*time.Second {
					t.Errorf("the batches waiting on the stalled server were answered %v after it stopped (timeout %v)", took, tc.timeout)
				}
			})
		}
	}
}
