package verify

import (
	"context"
	"io"

	"github.com/emqproxy/emqproxy/shamap"
)

// Config is one run of the harness.
type Config struct {
	// Addr is the scratch server, host:port: module loaded, branded
	// echomq:6.0.0, nothing else in its keyspace (unless Force).
	Addr     string
	Username string
	Password string
	// Map is the pinned map; BodiesDir holds <name>.lua for each script.
	Map       *shamap.Map
	BodiesDir string
	// Force allows a keyspace that holds other keys than the brand. The
	// harness still never touches them, but the server must be idle.
	Force bool
	// Out, when set, receives the printed report.
	Out io.Writer
	// Restart, when set, restarts the server so that it loads its AOF, and
	// returns once it has been started again (same address). Without it the
	// restart check is reported as not run: an operator's remote node cannot
	// be restarted from here.
	Restart func(ctx context.Context) error
}
