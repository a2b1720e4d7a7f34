// Command emqnode starts one stand node (a module, scripts or bare
// redis-server) with the stand's launcher, prints its address and stops it
// on SIGINT or SIGTERM. `make run` uses it for the local module node:
//
//	emqnode --role module --port 6390 --dir .run/node
//
// Without --dir the node lives in a temporary directory removed at exit.
// --server runs another server binary than Debian's redis-server (a
// valkey-server; `make run NODE_SERVER=...`).
//
//	emqnode --build-valkey ../shared/vendor/valkey-8.0.1.tar.gz
//
// builds Valkey from a source tarball into the stand's cache (or finds it
// there), prints the binary's path and exits; `make test` runs it once
// before the tests when given VALKEY_TARBALL, retrying a recorded failure.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/emqproxy/emqproxy/stand/node"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "emqnode:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("emqnode", flag.ContinueOnError)
	role := fs.String("role", "module", "module | scripts | bare")
	port := fs.Int("port", 0, "TCP port on 127.0.0.1 (0 picks a free one)")
	dir := fs.String("dir", "", "data directory (default: a temporary one, removed at exit)")
	aof := fs.Bool("aof", false, "append-only file with appendfsync always")
	brand := fs.String("brand", "", "legacy brand of a scripts node (default "+node.DefaultBrand+")")
	noBrand := fs.Bool("no-brand", false, "leave {emq}:version absent")
	password := fs.String("password", "", "requirepass for the default user")
	defs := fs.String("module-defs", "", "comma-separated extra -D flags for the module build")
	server := fs.String("server", "", "server binary (default: redis-server from PATH)")
	buildValkey := fs.String("build-valkey", "", "build Valkey from this source tarball (cached), print the binary's path and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *buildValkey != "" {
		bin, err := node.BuildValkey(*buildValkey, true)
		if err != nil {
			return err
		}
		fmt.Println(bin)
		return nil
	}
	r, err := node.ParseRole(*role)
	if err != nil {
		return err
	}
	opts := node.Options{
		Role: r, Port: *port, AOF: *aof, Brand: *brand, NoBrand: *noBrand,
		Password: *password, Args: fs.Args(), Server: *server,
	}
	if *defs != "" {
		opts.ModuleDefs = strings.Split(*defs, ",")
	}
	if *dir != "" {
		abs, err := filepath.Abs(*dir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		opts.Dir = abs
	}

	// Catch signals before starting, so none is lost during the start.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)

	n, err := node.Start(opts)
	if err != nil {
		return err
	}
	if *dir == "" {
		defer os.RemoveAll(n.Dir)
	}
	fmt.Printf("%s node %s (pid %d, dir %s)\n", r, n.Addr, n.PID(), n.Dir)

	s := <-sig
	fmt.Fprintf(os.Stderr, "emqnode: %v: stopping %s\n", s, n.Addr)
	return n.Stop()
}
