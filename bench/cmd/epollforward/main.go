// Command epollforward is the floor of an event-loop data path in Go, for
// the bench to set beside goforward (a goroutine per client) and
// twemproxy (an event loop in C): one goroutine, locked to its thread,
// waits in epoll on every socket, level-triggered, and per call reads the
// client, writes to the client's own upstream connection, reads the reply
// and writes it to the client; no goroutine is woken per call, and the
// runtime's network poller is not used. It parses nothing and keeps no
// order but the sockets' own, so it is correct only for a client that
// sends one command and waits for its reply (redis-benchmark at pipeline
// 1), which is all it is used for.
//
// It is written on golang.org/x/sys/unix rather than an event-loop
// library so that what it measures is the runtime's own cost per system
// call and nothing of a library's: the question it answers is what
// emqproxy's per-call cost would be if its sessions were not goroutines.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// end is one socket and what is still to be written to it.
type end struct {
	fd      int
	peer    *end
	pending []byte
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "the server's address")
	flag.Parse()
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "epollforward: --upstream is required")
		os.Exit(2)
	}
	if err := run(*listen, *upstream); err != nil {
		fmt.Fprintln(os.Stderr, "epollforward:", err)
		os.Exit(1)
	}
}

func run(listen, upstream string) error {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	la, err := sockaddr(listen)
	if err != nil {
		return err
	}
	ua, err := sockaddr(upstream)
	if err != nil {
		return err
	}
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := unix.Bind(lfd, la); err != nil {
		return fmt.Errorf("bind %s: %w", listen, err)
	}
	if err := unix.Listen(lfd, 1024); err != nil {
		return err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	if err := watch(ep, unix.EPOLL_CTL_ADD, lfd, unix.EPOLLIN); err != nil {
		return err
	}
	ends := map[int32]*end{}
	events := make([]unix.EpollEvent, 256)
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == lfd {
				accept(ep, lfd, ua, ends)
				continue
			}
			e := ends[ev.Fd]
			if e == nil {
				continue // closed with its peer earlier in this round
			}
			if ev.Events&unix.EPOLLOUT != 0 && !flush(ep, e) {
				closePair(e, ends)
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 && !relay(ep, e, buf) {
				closePair(e, ends)
			}
		}
	}
}

// accept takes every pending client and connects each to upstream.
func accept(ep, lfd int, ua unix.Sockaddr, ends map[int32]*end) {
	for {
		cfd, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: none left (or a failed accept: the client retries)
		}
		ufd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Connect(ufd, ua) // blocking, on loopback: done at once
			if err == nil {
				err = unix.SetNonblock(ufd, true)
			}
			if err != nil {
				_ = unix.Close(ufd)
			}
		}
		if err != nil {
			_ = unix.Close(cfd)
			continue
		}
		_ = unix.SetsockoptInt(cfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		_ = unix.SetsockoptInt(ufd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c, u := &end{fd: cfd}, &end{fd: ufd}
		c.peer, u.peer = u, c
		ends[int32(cfd)], ends[int32(ufd)] = c, u
		if watch(ep, unix.EPOLL_CTL_ADD, cfd, unix.EPOLLIN) != nil || watch(ep, unix.EPOLL_CTL_ADD, ufd, unix.EPOLLIN) != nil {
			closePair(c, ends)
		}
	}
}

// relay reads what e has and writes it to e's peer (what the peer does not
// take now waits there for EPOLLOUT); false when the pair is done.
func relay(ep int, e *end, buf []byte) bool {
	n, err := unix.Read(e.fd, buf)
	if errors.Is(err, unix.EAGAIN) {
		return true
	}
	if err != nil || n <= 0 {
		return false
	}
	p := e.peer
	if len(p.pending) > 0 {
		p.pending = append(p.pending, buf[:n]...)
		return true
	}
	w, err := unix.Write(p.fd, buf[:n])
	if err != nil && !errors.Is(err, unix.EAGAIN) {
		return false
	}
	w = max(w, 0)
	if w < n {
		p.pending = append(p.pending[:0], buf[w:n]...)
		return watch(ep, unix.EPOLL_CTL_MOD, p.fd, unix.EPOLLIN|unix.EPOLLOUT) == nil
	}
	return true
}

// flush writes what waits for e; once it is all written, e is watched for
// reading only again. false when the pair is done.
func flush(ep int, e *end) bool {
	for len(e.pending) > 0 {
		w, err := unix.Write(e.fd, e.pending)
		if errors.Is(err, unix.EAGAIN) {
			return true
		}
		if err != nil {
			return false
		}
		e.pending = e.pending[w:]
	}
	return watch(ep, unix.EPOLL_CTL_MOD, e.fd, unix.EPOLLIN) == nil
}

// closePair closes e and its peer and forgets both (closing a socket
// removes it from epoll).
func closePair(e *end, ends map[int32]*end) {
	for _, x := range []*end{e, e.peer} {
		delete(ends, int32(x.fd))
		_ = unix.Close(x.fd)
	}
}

func watch(ep, op, fd int, events uint32) error {
	return unix.EpollCtl(ep, op, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)})
}

// sockaddr resolves an IPv4 host:port (the bench's loopback addresses).
func sockaddr(addr string) (unix.Sockaddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return nil, fmt.Errorf("%s: not an IPv4 address", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: p}
	copy(sa.Addr[:], ip)
	return sa, nil
}
