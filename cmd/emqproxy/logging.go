package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/emqproxy/emqproxy/config"
)

// newLogger builds the operational log (stderr, level and format from the
// configuration) and the level a reload sets.
func newLogger(c config.Log) (*zap.Logger, zap.AtomicLevel, error) {
	lvl := zap.NewAtomicLevel()
	if err := lvl.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, lvl, fmt.Errorf("log.level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if c.Format == "console" {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	core := zapcore.NewCore(encoder, zapcore.Lock(os.Stderr), lvl)
	return zap.New(core).Named("emqproxy"), lvl, nil
}

// newAuditLogger builds the audit log: JSON lines on its own sink, separate
// from the operational log, so an operator can ship or retain it on its own.
// The record fields are documented in proxy/observe/audit.go.
//
// The audit log never drops a record: a slow sink slows the sessions that
// write to it. A write the sink refuses (disk full, closed pipe) loses its
// records; such writes are counted in writeErrors
// (emqproxy_audit_write_errors_total); when the failure surfaces on a
// record's own write (the buffer full and flushed), the session also
// reports it on the operational log ("audit records not written").
func newAuditLogger(c config.Audit, writeErrors prometheus.Counter) (*zap.Logger, func(), error) {
	// The sink, counted; then, except on stderr (which the operational log
	// shares, line by line), a buffer flushed every second and on close, so
	// the audit log does not cost a write system call per record.
	var base zapcore.WriteSyncer
	closeFile := func() {}
	switch c.Sink {
	case "stderr":
		base = os.Stderr
	case "stdout":
		base = os.Stdout
	default:
		if err := os.MkdirAll(filepath.Dir(c.Sink), 0o755); err != nil {
			return nil, nil, fmt.Errorf("audit.sink: %w", err)
		}
		f, err := os.OpenFile(c.Sink, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return nil, nil, fmt.Errorf("audit.sink: %w", err)
		}
		base = f
		closeFile = func() { _ = f.Close() }
	}
	ws := zapcore.WriteSyncer(countingSyncer{WriteSyncer: base, errors: writeErrors})
	closeFn := closeFile
	if c.Sink == "stderr" {
		ws = zapcore.Lock(ws)
	} else {
		bws := &zapcore.BufferedWriteSyncer{WS: ws, FlushInterval: time.Second}
		ws = bws
		closeFn = func() { _ = bws.Stop(); closeFile() }
	}
	enc := zapcore.EncoderConfig{
		TimeKey:        "ts",
		MessageKey:     "msg",
		LevelKey:       zapcore.OmitKey,
		NameKey:        zapcore.OmitKey,
		EncodeTime:     zapcore.RFC3339NanoTimeEncoder,
		EncodeDuration: zapcore.MillisDurationEncoder,
		LineEnding:     zapcore.DefaultLineEnding,
	}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), ws, zapcore.InfoLevel)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(os.Stderr))).Named("audit"), closeFn, nil
}

// countingSyncer counts the writes its sink refuses.
type countingSyncer struct {
	zapcore.WriteSyncer
	errors prometheus.Counter
}

func (c countingSyncer) Write(p []byte) (int, error) {
	n, err := c.WriteSyncer.Write(p)
	if err != nil {
		c.errors.Inc()
	}
	return n, err
}
