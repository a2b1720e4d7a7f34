package legacy

import (
	"time"

	"github.com/emqproxy/emqproxy/shamap"
)

// DefaultBrand is the legacy brand the client claims and accepts unless
// Options.Brand says otherwise.
const DefaultBrand = "echomq:4.0.0"

// VersionKey is the key the fence reads.
const VersionKey = "{emq}:version"

// Default limits.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultPoolSize    = 4
)

// Options configure a Client.
type Options struct {
	Addr       string // host:port of the server or the proxy
	Username   string // AUTH user ("" = the default user)
	Password   string // AUTH password ("" = no AUTH)
	DB         int    // SELECT db when not 0
	ClientName string // CLIENT SETNAME when not ""
	Brand      string // the client's own brand; "" = DefaultBrand

	// Record, when set, is called once for every reply the client saw: the
	// boot and fence replies of every connection ("boot", "fence"), the
	// pause read of Claim ("paused") and the final reply of every script
	// line (the script's name). The NOSCRIPT reply and the SCRIPT LOAD it
	// causes are not recorded; Call.Reloaded marks the line instead. Calls
	// are serialized by the client.
	Record func(Call)

	// Map, when set, must pin every script the client sends with the sha
	// of its body; Dial fails with ErrScript otherwise.
	Map *shamap.Map
	// Bodies returns a script body by name; nil = the stand's scripts
	// (package scripts). Tests use it to send a body the map does not pin.
	Bodies func(name string) []byte

	DialTimeout time.Duration // per connect, boot and fence included; 0 = DefaultDialTimeout
	PoolSize    int           // dedicated connections for Tx; 0 = DefaultPoolSize
}

// Call is one reply the client saw, given to Options.Record.
type Call struct {
	Op       string   // script name, or "boot", "fence", "paused"
	Line     []string // the command as sent
	Reply    Value    // the reply (for a line after NOSCRIPT, the reply to the resent line)
	Reloaded bool     // the line got NOSCRIPT and was sent again after SCRIPT LOAD
}

func (o Options) withDefaults() Options {
	if o.Brand == "" {
		o.Brand = DefaultBrand
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.PoolSize <= 0 {
		o.PoolSize = DefaultPoolSize
	}
	return o
}
