package chaos

import (
	"bytes"

	"github.com/rs/zerolog"
	"go.uber.org/zap"
)

// toxiLogger is the logger handed to toxiproxy.NewServer. zerolog appears
// in chaos/ only because that function's parameter is a zerolog.Logger;
// everything toxiproxy writes to it goes on to l, one debug entry per JSON
// line, so the campaign logs through zap alone. A nil l logs nothing, and
// when l would drop debug entries the zerolog side is disabled, so
// toxiproxy does not build lines nobody reads.
func toxiLogger(l *zap.Logger) zerolog.Logger {
	if l == nil {
		l = zap.NewNop()
	}
	level := zerolog.TraceLevel
	if !l.Core().Enabled(zap.DebugLevel) {
		level = zerolog.Disabled
	}
	return zerolog.New(zapLines{l}).Level(level)
}

// zapLines forwards each line written to it to a zap logger at debug level.
type zapLines struct{ l *zap.Logger }

func (w zapLines) Write(p []byte) (int, error) {
	w.l.Debug("toxiproxy", zap.ByteString("line", bytes.TrimSuffix(p, []byte("\n"))))
	return len(p), nil
}
