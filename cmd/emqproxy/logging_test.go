package main

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zapcore"
)

type refusingSink struct{ fail bool }

func (r *refusingSink) Write(p []byte) (int, error) {
	if r.fail {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func (r *refusingSink) Sync() error { return nil }

func TestAuditSinkErrorsAreCounted(t *testing.T) {
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "t_total", Help: "t"})
	sink := &refusingSink{}
	ws := countingSyncer{WriteSyncer: zapcore.AddSync(sink), errors: errs}
	if _, err := ws.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	sink.fail = true
	if _, err := ws.Write([]byte("{}\n")); err == nil {
		t.Fatal("the refused write reported no error")
	}
	if got := testutil.ToFloat64(errs); got != 1 {
		t.Errorf("write errors counted %v, want 1", got)
	}
}
