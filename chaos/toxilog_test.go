package chaos

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestToxiLoggerForwardsToZap(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	zl := toxiLogger(zap.New(core))
	zl.Info().Str("proxy", "relay1").Msg("Started proxy")
	got := logs.All()
	if len(got) != 1 || got[0].Level != zap.DebugLevel || got[0].Message != "toxiproxy" {
		t.Fatalf("entries = %+v, want one debug entry", got)
	}
	line, _ := got[0].ContextMap()["line"].(string)
	if want := `{"level":"info","proxy":"relay1","message":"Started proxy"}`; line != want {
		t.Fatalf("line = %q, want %q", line, want)
	}

	quiet, logs := observer.New(zap.InfoLevel)
	for _, l := range []*zap.Logger{zap.New(quiet), nil} {
		zl := toxiLogger(l)
		zl.Info().Msg("dropped")
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d entries logged below the zap logger's level", n)
	}
}
