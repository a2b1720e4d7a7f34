// Command proxyd runs the proxy's data path (proxy.New, Serve) with the
// fewest moving parts, for the benchmarks: one upstream, the pinned map,
// the audit log on a file or truly off (a nil audit logger: no record is
// built or encoded), no fence hook, no metrics registry, and an optional
// pprof listener. It exists so the audit log's cost can be measured against
// a proxy that has none; `emqproxy serve` is what operators run.
//
//	proxyd --listen 127.0.0.1:7000 --upstream 127.0.0.1:6390 --map stand/map.yaml --audit off
//
// GOMAXPROCS is taken from the environment, as for any Go program.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "proxyd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("proxyd", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:6380", "client listener (loopback)")
	upstream := fs.String("upstream", "127.0.0.1:6390", "module node host:port")
	mapPath := fs.String("map", "stand/map.yaml", "the pinned map")
	auditTo := fs.String("audit", "off", `"off" (no audit logger) or a file path (buffered JSON lines)`)
	pprofAddr := fs.String("pprof", "", "host:port serving /debug/pprof/ (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	m, err := shamap.Load(*mapPath)
	if err != nil {
		return err
	}
	audit, closeAudit, err := auditLogger(*auditTo)
	if err != nil {
		return err
	}
	defer closeAudit()
	srv, err := proxy.New(proxy.Options{
		Listen:   *listen,
		Upstream: proxy.UpstreamOptions{Name: "module-a", Address: *upstream},
		Policy:   &rewrite.Policy{Map: m},
	}, nil, audit)
	if err != nil {
		return err
	}
	if *pprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		hs := &http.Server{Addr: *pprofAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.ListenAndServe() }()
		defer hs.Close()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		_ = srv.Close()
	}()
	fmt.Printf("proxyd %s -> %s (audit %s)\n", ln.Addr(), *upstream, *auditTo)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, proxy.ErrServerClosed) {
		return err
	}
	return nil
}

// auditLogger returns nil for "off", else a JSON logger on a buffered file
// (the same shape as the binary's file sink).
func auditLogger(to string) (*zap.Logger, func(), error) {
	if to == "off" {
		return nil, func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, nil, err
	}
	ws := &zapcore.BufferedWriteSyncer{WS: f}
	enc := zapcore.EncoderConfig{
		TimeKey: "ts", MessageKey: "msg", LevelKey: zapcore.OmitKey, NameKey: zapcore.OmitKey,
		EncodeTime: zapcore.RFC3339NanoTimeEncoder, EncodeDuration: zapcore.MillisDurationEncoder,
		LineEnding: zapcore.DefaultLineEnding,
	}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), ws, zapcore.InfoLevel)
	return zap.New(core), func() { _ = ws.Stop(); _ = f.Close() }, nil
}
