package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// floodTimeout bounds one flooding client's connection: eight 96 MiB
// commands pass one or two at a time on a busy machine.
const floodTimeout = 2 * time.Minute

// memPeak samples the process's heap and stacks in use until stopped and
// keeps the largest value seen.
type memPeak struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

// inUse is the process's heap and stack bytes in use now.
func inUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// sampleMem starts sampling every 2ms.
func sampleMem() *memPeak {
	m := &memPeak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if v := inUse(); v > m.peak.Load() {
				m.peak.Store(v)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// end stops sampling and returns the peak.
func (m *memPeak) end() uint64 {
	close(m.stop)
	<-m.done
	return m.peak.Load()
}

// vmRSS reads the process's resident set from /proc (0 when unreadable).
func vmRSS(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// sendBigSet writes `SET key <size bytes>` in 1 MiB pieces (so the test's
// own memory stays small) and returns the reply.
func sendBigSet(addr, key string, size int) (string, error) {
	nc, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(floodTimeout))
	head := fmt.Sprintf("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, size)
	if _, err := nc.Write([]byte(head)); err != nil {
		return "", err
	}
	piece := bytes.Repeat([]byte("x"), 1<<20)
	for left := size; left > 0; left -= len(piece) {
		if _, err := nc.Write(piece[:min(left, len(piece))]); err != nil {
			return "", err
		}
	}
	if _, err := nc.Write([]byte("\r\n")); err != nil {
		return "", err
	}
	b, err := node.ReadReply(bufio.NewReader(nc))
	return string(b), err
}

func TestBufferedBytesBoundTheProcess(t *testing.T) {
	node.EachServer(t, testBufferedBytesBoundTheProcess)
}

// Eight clients each send a 96 MiB SET at once while a ninth sends GETs:
// the ninth is served throughout, every SET succeeds or gets the budget's
// error, and the process's heap stays a few hundred MiB above where it
// began (it went past 1 GiB when every client's command was buffered and
// copied at once).
func testBufferedBytesBoundTheProcess(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	h := startProxy(t, n, nil)
	ninth := h.dial()
	ninth.do("SET", "small", "v").is("+OK\r\n")

	const clients, size = 8, 96 << 20
	runtime.GC()
	base := inUse()
	mem := sampleMem()
	var wg sync.WaitGroup
	var done atomic.Int32
	replies := make([]string, clients)
	errs := make([]error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			replies[i], errs[i] = sendBigSet(h.addr, "big", size)
		}()
	}
	// The ninth client is served while the SETs stream: it counts the GETs
	// answered before the last SET's reply.
	gets, during := 0, 0
	for done.Load() < clients {
		_ = ninth.nc.SetDeadline(time.Now().Add(testTimeout))
		ninth.do("GET", "small").is("$1\r\nv\r\n")
		gets++
		if done.Load() < clients {
			during++
		}
	}
	wg.Wait()
	peak := mem.end()
	ok := 0
	for i := range clients {
		switch {
		case errs[i] != nil:
			t.Errorf("SET %d: %v", i, errs[i])
		case replies[i] == "+OK\r\n":
			ok++
		case strings.HasPrefix(replies[i], "-ERR emqproxy: ") && strings.Contains(replies[i], "limits.buffered_bytes"):
		default:
			t.Errorf("SET %d answered %q", i, replies[i])
		}
	}
	grew := peak - min(base, peak)
	t.Logf("%d of %d SETs of %d MiB succeeded; heap+stacks %d MiB at start, peak %d MiB (+%d MiB); VmHWM %d MiB; %d GETs answered during the flood",
		ok, clients, size>>20, base>>20, peak>>20, grew>>20, vmRSS("VmHWM")>>20, during)
	if ok == 0 {
		t.Error("no SET succeeded")
	}
	if during < 10 {
		t.Errorf("the ninth client got %d GETs answered while the SETs streamed, want at least 10", during)
	}
	// The default budget is 128 MiB: with the runtime's garbage on top the
	// heap may reach about twice that, well under the shipped manifests'
	// 512 Mi.
	const bound = 384 << 20
	if grew > bound {
		t.Errorf("the heap grew by %d MiB under the flood, want at most %d MiB", grew>>20, bound>>20)
	}
	// Every client is still served afterwards.
	ninth.do("STRLEN", "big").is(":" + strconv.Itoa(size) + "\r\n")
}
