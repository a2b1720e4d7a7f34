// Package netaddr reads the addresses of the configuration, a TCP
// host:port or a Unix socket's path written unix:/path/to.sock, and
// listens on and dials them.
//
// A Unix socket listener (Listen) sets its file's mode, replaces a stale
// file a killed process left, refuses a path another live process listens
// on, and removes its file when it is closed.
package netaddr

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
)

// UnixPrefix starts the address of a Unix socket: unix:/path/to.sock.
const UnixPrefix = "unix:"

// ErrInvalid is wrapped by the errors of Parse.
var ErrInvalid = errors.New("netaddr: invalid address")

// IsUnix reports whether addr names a Unix socket.
func IsUnix(addr string) bool { return strings.HasPrefix(addr, UnixPrefix) }

// Split returns the network ("unix" or "tcp") and the address net.Dial
// and net.Listen take for addr: the path of a Unix socket, else addr.
func Split(addr string) (network, address string) {
	if p, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		return "unix", p
	}
	return "tcp", addr
}

// Parse checks addr: host:port, or unix: and an absolute path.
func Parse(addr string) (network, address string, err error) {
	network, address = Split(addr)
	if network == "unix" {
		switch {
		case address == "":
			return "", "", fmt.Errorf("%w: %q: unix: names no path", ErrInvalid, addr)
		case !strings.HasPrefix(address, "/"):
			return "", "", fmt.Errorf("%w: %q: the socket's path must be absolute (unix:/path/to.sock)", ErrInvalid, addr)
		case strings.ContainsRune(address, 0):
			return "", "", fmt.Errorf("%w: %q: the path holds a NUL byte", ErrInvalid, addr)
		case len(address) > maxPath:
			return "", "", fmt.Errorf("%w: %q: the path is %d bytes, over the %d a Unix socket's may have", ErrInvalid, addr, len(address), maxPath)
		}
		return network, address, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", "", fmt.Errorf("%w: %q is not host:port or unix:/path/to.sock", ErrInvalid, addr)
	}
	return network, address, nil
}

// maxPath is the longest path of a Unix socket (sun_path of Linux's
// sockaddr_un, less its terminating NUL).
const maxPath = 107

// DialContext dials addr (host:port or unix:/path) with d.
func DialContext(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	network, address := Split(addr)
	return d.DialContext(ctx, network, address)
}

// DialValkey is a valkey-go ClientOption.DialCtxFn that also dials
// unix:/path addresses; TLS, when set, runs over either transport.
func DialValkey(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if cfg == nil {
		return DialContext(ctx, d, addr)
	}
	network, address := Split(addr)
	td := tls.Dialer{NetDialer: d, Config: cfg}
	if network == "unix" && cfg.ServerName == "" {
		// tls.Dialer takes the name to verify from a host:port address.
		c := cfg.Clone()
		c.ServerName = "localhost"
		td.Config = c
	}
	return td.DialContext(ctx, network, address)
}

// Peer returns a client connection's address and the local address it
// reached, as a server writes them in CLIENT LIST (addr=, laddr=): the
// host:port pairs of a TCP connection, and for a Unix socket's the
// socket's path followed by ":0" for both, as Redis and Valkey write them
// (the peer of a Unix socket has no address of its own).
func Peer(nc net.Conn) (addr, laddr string) {
	la := nc.LocalAddr()
	if la != nil && la.Network() == "unix" {
		laddr = la.String() + ":0"
		return laddr, laddr
	}
	if ra := nc.RemoteAddr(); ra != nil {
		addr = ra.String()
	}
	if la != nil {
		laddr = la.String()
	}
	return addr, laddr
}
