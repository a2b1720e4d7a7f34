// Command jobmix runs the legacy job mix (enqueue, claim, complete) against
// one address and prints the result as one JSON line:
//
//	jobmix --mode legacy --addr 127.0.0.1:6380 --clients 50 --pipeline 16 --duration 5s
//
// --mode legacy uses the stand's wire-4 client (a scripts node, or the proxy
// in front of a module node); --mode native sends EMQ.* directly to a module
// node. See package bench/jobmix for what one op is.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/bench/jobmix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "jobmix:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("jobmix", flag.ContinueOnError)
	mode := fs.String("mode", "legacy", "legacy (wire-4 client, EVALSHA) | native (EMQ.* with valkey-go) | get (GETs with valkey-go)")
	addr := fs.String("addr", "127.0.0.1:6380", "host:port to drive (loopback)")
	clients := fs.Int("clients", 50, "concurrent clients, one connection and one queue each")
	pipeline := fs.Int("pipeline", 1, "calls per round trip")
	warmup := fs.Duration("warmup", time.Second, "time run but not counted")
	duration := fs.Duration("duration", 5*time.Second, "measured window")
	payload := fs.Int("payload", 64, "payload bytes per job")
	tag := fs.String("tag", "", "queue and id prefix (default: unique per run)")
	pauseRead := fs.Bool("pause-read", false, "native: read the pause flag before each claim, as the legacy client does")
	keepGoing := fs.Bool("keep-going", false, "count a failed call and go on (the result's errors) instead of stopping the run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := jobmix.Run(ctx, jobmix.Config{
		Mode: jobmix.Mode(*mode), Addr: *addr, Clients: *clients, Pipeline: *pipeline,
		Warmup: *warmup, Duration: *duration, Payload: *payload, Tag: *tag, PauseRead: *pauseRead,
		KeepGoing: *keepGoing,
	})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
