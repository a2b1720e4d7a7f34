// Command goforward is the least a Go proxy of emqproxy's design does per
// call, for the bench's one-client latency (section 1c) to show the floor
// of that design beside emqproxy and twemproxy: one goroutine per client,
// GOMAXPROCS 1 (emqproxy's default), the runtime's network poller, and per
// call a read of the client, a write to the client's own upstream
// connection, a read of the reply and a write to the client. It parses
// nothing, so it is correct only for a client that sends one command and
// waits for its reply (redis-benchmark at pipeline 1), which is all it is
// used for.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := flag.String("upstream", "", "the server's address")
	flag.Parse()
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "goforward: --upstream is required")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goforward:", err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "goforward:", err)
			os.Exit(1)
		}
		go forward(c, *upstream)
	}
}

// forward relays c's calls to a connection of its own to upstream, one
// call at a time.
func forward(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	in, out := make([]byte, 16<<10), make([]byte, 16<<10)
	for {
		n, err := c.Read(in)
		if err != nil {
			return
		}
		if _, err := u.Write(in[:n]); err != nil {
			return
		}
		m, err := u.Read(out)
		if err != nil {
			return
		}
		if _, err := c.Write(out[:m]); err != nil {
			return
		}
	}
}
