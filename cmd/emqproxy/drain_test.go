package main

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// drainClient pipelines INCRs of its own counter in batches and counts
// the replies it got, until the proxy closes it.
type drainClient struct {
	key     string
	replies int64 // integer replies: executed and answered
	errors  int64 // error replies: outcome unknown to the client
	batches atomic.Int64
	end     error
}

func (c *drainClient) run(addr string, batch int) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		c.end = err
		return
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	var req []byte
	for range batch {
		req = resp.AppendCommand(req, "INCR", c.key)
	}
	for {
		_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := nc.Write(req); err != nil {
			c.end = err
			return
		}
		for range batch {
			r, err := resp.ReadReply(br)
			if err != nil {
				c.end = err
				return
			}
			switch r[0] {
			case ':':
				c.replies++
			default:
				c.errors++
			}
		}
		c.batches.Add(1)
	}
}

func TestServeSIGTERMUnderLoad(t *testing.T) {
	up := node.StartT(t, node.Options{Role: node.Module})
	p := startProxy(t, up.Addr, "")
	const clients, batch = 16, 50
	cs := make([]*drainClient, clients)
	var wg sync.WaitGroup
	for i := range cs {
		cs[i] = &drainClient{key: "drain:" + strconv.Itoa(i)}
		wg.Add(1)
		go func() { defer wg.Done(); cs[i].run(p.listen, batch) }()
	}
	// Every client is under way.
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range cs {
		for c.batches.Load() < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("client %s made no progress: %v", c.key, c.end)
			}
			time.Sleep(time.Millisecond)
		}
	}
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// It stops accepting.
	var stopped time.Duration
	for time.Since(start) < 5*time.Second {
		nc, err := net.DialTimeout("tcp", p.listen, 100*time.Millisecond)
		if err != nil {
			stopped = time.Since(start)
			break
		}
		_ = nc.Close()
		time.Sleep(time.Millisecond)
	}
	if stopped == 0 {
		t.Error("the listener still accepted 5s after SIGTERM")
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	var exitErr error
	select {
	case exitErr = <-exited:
	case <-time.After(15 * time.Second):
		t.Fatal("emqproxy did not exit within the 5s drain deadline and a margin")
	}
	drain := time.Since(start)
	wg.Wait()
	if exitErr != nil {
		t.Errorf("exit: %v", exitErr)
	}

	// Per client: every executed INCR got its reply and every reply is of
	// an executed INCR: the counter equals the replies (the drain ended
	// well before its deadline), or, if some command got an error reply,
	// lies between.
	var replies, executed, errs int64
	unanswered, phantom := 0, 0
	for _, c := range cs {
		got := rawCommand(t, up.Addr, "GET", c.key)
		v, err := bulkInt(got)
		if err != nil {
			t.Fatalf("GET %s = %q", c.key, got)
		}
		replies += c.replies
		executed += v
		errs += c.errors
		if c.replies > v {
			phantom++
			t.Errorf("%s: %d replies for %d executed INCRs", c.key, c.replies, v)
		}
		if v > c.replies+c.errors {
			unanswered++
			t.Errorf("%s: %d INCRs executed, %d answered (%d errors); the drain ended in %v", c.key, v, c.replies, c.errors, drain)
		}
	}
	t.Logf("SIGTERM under load: listener closed in %v, exit after %v; %d clients: %d INCRs executed, %d replies, %d error replies; %d clients with a reply for an unexecuted command, %d with an executed command unanswered",
		stopped.Round(time.Millisecond), drain.Round(time.Millisecond), clients, executed, replies, errs, phantom, unanswered)
	if drain > 5*time.Second {
		t.Errorf("the drain took %v, deadline 5s", drain)
	}
}

// bulkInt parses a bulk-string reply holding an integer ("$-1" is 0).
func bulkInt(reply string) (int64, error) {
	if reply == "$-1\r\n" {
		return 0, nil
	}
	var n int
	var v int64
	if _, err := fmt.Sscanf(reply, "$%d\r\n%d\r\n", &n, &v); err != nil {
		return 0, err
	}
	return v, nil
}
