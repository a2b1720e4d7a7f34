// Command demo runs the seed's transition through emqproxy, as `make demo`
// does: it starts a module node and the emqproxy binary in front of it (on
// free loopback ports, in a temporary directory), drives the legacy wire-4
// client through the proxy (enqueue JOB0KHTOWnGLuC on queue quotes, claim it
// with a 30000 ms lease), and prints what the client saw, what the module
// node holds, and the audit records the proxy wrote.
//
//	demo --emqproxy bin/emqproxy
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

func main() {
	bin := flag.String("emqproxy", "bin/emqproxy", "the emqproxy binary")
	flag.Parse()
	if err := run(*bin); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(bin string) error {
	dir, err := os.MkdirTemp("", "emqproxy-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	n, err := node.Start(node.Options{Role: node.Module})
	if err != nil {
		return err
	}
	defer func() { _ = n.Stop() }()
	listen, admin := freeAddr(), freeAddr()
	audit := filepath.Join(dir, "audit.log")
	cfg := filepath.Join(dir, "emqproxy.yaml")
	body := fmt.Sprintf("listen: %q\nmap: %q\nupstreams:\n  module-a:\n    address: %q\n    role: module\n"+
		"routes:\n  - queues: [\"*\"]\n    upstream: module-a\naudit:\n  sink: %q\nadmin:\n  listen: %q\nlog:\n  level: warn\n",
		listen, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), n.Addr, audit, admin)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		return err
	}
	proxy := exec.Command(bin, "serve", "--config", cfg)
	proxy.Stderr = os.Stderr
	if err := proxy.Start(); err != nil {
		return err
	}
	defer func() { _ = proxy.Process.Kill(); _, _ = proxy.Process.Wait() }()

	fmt.Printf("module node %s, emqproxy %s\n\n", n.Addr, listen)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := dialWhenUp(ctx, listen)
	if err != nil {
		return err
	}
	defer c.Close()

	const q, id = "quotes", "JOB0KHTOWnGLuC"
	ok, err := c.Enqueue(ctx, q, id, `{"quote":"hello"}`)
	if err != nil {
		return err
	}
	fmt.Printf("client> enqueue %s %s  ->  %v\n", q, id, ok)
	show(os.Stdout, n, "after the enqueue")
	job, empty, err := c.Claim(ctx, q, 30000)
	if err != nil {
		return err
	}
	fmt.Printf("client> claim %s 30000  ->  %+v (empty: %v)\n", q, job, empty)
	show(os.Stdout, n, "after the claim")

	// Stopping the proxy flushes its audit log.
	_ = proxy.Process.Signal(os.Interrupt)
	_, _ = proxy.Process.Wait()
	b, err := os.ReadFile(audit)
	if err != nil {
		return err
	}
	fmt.Println("audit records:")
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		fmt.Println("  " + sc.Text())
	}
	return nil
}

// dialWhenUp connects the legacy client once the proxy accepts connections.
func dialWhenUp(ctx context.Context, addr string) (*legacy.Client, error) {
	for {
		c, err := legacy.Dial(ctx, legacy.Options{Addr: addr})
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("proxy at %s: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// show prints the module node's keys of the demo queue, each command as
// redis-cli would show it at its prompt.
func show(w io.Writer, n *node.Node, when string) {
	fmt.Fprintf(w, "module node, %s:\n", when)
	for _, cmd := range showCommands {
		fmt.Fprintf(w, "  %s> %s\n", n.Addr, strings.Join(cmd, " "))
		b, err := node.RawDo(n.Addr, cmd...)
		var text string
		if err == nil {
			text, err = formatCLI(b)
		}
		if err != nil {
			fmt.Fprintf(w, "  %v\n", err)
			continue
		}
		for _, line := range strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n") {
			fmt.Fprintf(w, "  %s", line)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// showCommands read the demo queue's keys.
var showCommands = [][]string{
	{"HGETALL", "emq:{quotes}:job:JOB0KHTOWnGLuC"},
	{"ZRANGE", "emq:{quotes}:pending", "0", "-1", "WITHSCORES"},
	{"ZRANGE", "emq:{quotes}:active", "0", "-1", "WITHSCORES"},
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
