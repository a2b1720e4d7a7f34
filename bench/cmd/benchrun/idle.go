package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"
)

// idleResult is the proxy's memory with idle clients.
type idleResult struct {
	conns         int
	before, after int64 // VmRSS bytes
}

func (i idleResult) perConn() float64 { return float64(i.after-i.before) / float64(i.conns) }

// idleMemory opens conns client connections to p, each sending one PING
// and reading PONG (so its session is set up), then reads p's RSS once it
// settles.
func (r *runner) idleMemory(p *proc, conns int) (idleResult, error) {
	res := idleResult{conns: conns, before: settledRSS(p.pid())}
	open := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	ping := []byte("*1\r\n$4\r\nPING\r\n")
	buf := make([]byte, 7)
	for range conns {
		c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		if err != nil {
			return res, fmt.Errorf("idle client %d: %w", len(open), err)
		}
		open = append(open, c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(ping); err != nil {
			return res, err
		}
		if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, []byte("+PONG\r\n")) {
			return res, fmt.Errorf("idle client %d: PING answered %q, %v", len(open), buf, err)
		}
	}
	res.after = settledRSS(p.pid())
	return res, nil
}

// settledRSS reads RSS until two reads 200ms apart agree within 1% (at most 3s).
func settledRSS(pid int) int64 {
	prev := rssOf(pid)
	for range 15 {
		time.Sleep(200 * time.Millisecond)
		cur := rssOf(pid)
		if d := cur - prev; d < prev/100 && -d < prev/100 {
			return cur
		}
		prev = cur
	}
	return prev
}
