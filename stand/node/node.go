package node

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Role is what a node runs and how it is branded.
type Role int

const (
	// Scripts is a plain server branded with the legacy brand (wire 4).
	Scripts Role = iota
	// Module is a server with the stand's module loaded, branded by EMQ.INSTALL.
	Module
	// Bare is a plain server with no module and no brand.
	Bare
)

// String returns the role's name as the command line spells it.
func (r Role) String() string {
	switch r {
	case Scripts:
		return "scripts"
	case Module:
		return "module"
	case Bare:
		return "bare"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// ParseRole parses "scripts", "module" or "bare".
func ParseRole(s string) (Role, error) {
	for _, r := range []Role{Scripts, Module, Bare} {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown role %q", ErrStart, s)
}

// DefaultBrand is the legacy brand a scripts node gets unless Options.Brand is set.
const DefaultBrand = "echomq:4.0.0"

// VersionKey is the key that holds a node's brand.
const VersionKey = "{emq}:version"

// Options describe one node.
type Options struct {
	Role       Role
	Brand      string   // legacy brand for Scripts (default DefaultBrand); Module always uses EMQ.INSTALL
	NoBrand    bool     // leave {emq}:version absent
	AOF        bool     // appendonly yes, appendfsync always
	Password   string   // requirepass for the default user
	ACL        []string // extra "ACL SETUSER" rule lines applied at start, e.g. "alice on >pw ~emq:{a}:* +@all"
	Port       int      // 0 = pick a free loopback port
	Dir        string   // "" = a new temp dir
	ModuleDefs []string // extra -D flags for the module build (test builds)
	Args       []string // extra server arguments
	// Server is the server binary (Server.Path of an entry of Servers);
	// "" runs Debian's redis-server, the stand's default.
	Server string
	// ReplicaOf, when set (host:port), starts the node as a replica of that
	// primary (--replicaof, and --masterauth with Password). A replica is
	// never branded: the brand reaches it with the primary's data.
	ReplicaOf string
	// Sentinel, when set, starts the server as a sentinel (--sentinel with
	// a config file written into Dir) instead of a data node: no module,
	// no brand, whatever Role says. See sentinel.go.
	Sentinel *SentinelConfig
}

// Timeouts of the lifecycle steps.
const (
	startTimeout = 20 * time.Second
	stopTimeout  = 10 * time.Second
	pollEvery    = 5 * time.Millisecond
	portAttempts = 8
)

// Node is one running (or stopped) redis-server process.
type Node struct {
	Addr string  // 127.0.0.1:<port>
	Port int     // the TCP port
	Dir  string  // working directory (AOF, logs)
	Opts Options // options of the current run, defaults filled in

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Start starts a node, waits until it answers PING, applies the ACL lines
// and brands it.
func Start(opts Options) (*Node, error) {
	n := &Node{}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "emqnode-")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
		opts.Dir = dir
	}
	if err := n.start(opts); err != nil {
		return nil, err
	}
	return n, nil
}

// Restart stops the node (if running) and starts it again on the same port
// and dir with opts, possibly in another role. The data survives when the
// previous run wrote an AOF and opts.AOF is set. An empty opts.Server keeps
// the server binary of the previous run: a restart is the same node, and a
// test over the table of servers must not fall back to the default one.
func (n *Node) Restart(opts Options) error {
	if n.running() {
		if err := n.Stop(); err != nil {
			return err
		}
	}
	opts.Port = n.Port
	opts.Dir = n.Dir
	if opts.Server == "" {
		n.mu.Lock()
		opts.Server = n.Opts.Server
		n.mu.Unlock()
	}
	return n.start(opts)
}

func (n *Node) start(opts Options) error {
	if opts.Role == Scripts && opts.Brand == "" {
		opts.Brand = DefaultBrand
	}
	bin, err := opts.serverBinary()
	if err != nil {
		return err
	}
	var module string
	if opts.Role == Module && opts.Sentinel == nil {
		if module, err = BuildModule(opts.ModuleDefs...); err != nil {
			return err
		}
	}
	fixed := opts.Port != 0
	var lastErr error
	for attempt := 0; attempt < portAttempts; attempt++ {
		port := opts.Port
		if !fixed {
			if port, err = FreePort(); err != nil {
				return err
			}
		}
		inUse, err := n.launch(bin, module, port, opts)
		if err == nil {
			break
		}
		lastErr = err
		if !inUse {
			return err
		}
		if attempt == portAttempts-1 {
			return lastErr
		}
	}
	if err := n.setup(); err != nil {
		_ = n.Kill()
		return err
	}
	return nil
}

// launch runs the server once on port and waits until it answers. inUse
// reports a failure because the port was taken.
func (n *Node) launch(bin, module string, port int, opts Options) (inUse bool, err error) {
	pre, post, err := opts.haArgs()
	if err != nil {
		return false, err
	}
	args := append(pre,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--dir", opts.Dir, "--daemonize", "no", "--loglevel", "warning",
	)
	if opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	if opts.Password != "" {
		args = append(args, "--requirepass", opts.Password)
	}
	if module != "" {
		args = append(args, "--loadmodule", module)
	}
	args = append(args, post...)
	args = append(args, opts.Args...)

	logPath := filepath.Join(opts.Dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrStart, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group keeps a terminal's Ctrl-C for the owner, who
	// stops the node in order; the parent-death signal makes sure a node
	// never outlives the process that started it (a killed or timed-out test).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return false, fmt.Errorf("%w: %s: %v", ErrStart, bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()

	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.Port = port
	n.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	n.Dir = opts.Dir
	n.Opts = opts
	n.mu.Unlock()

	if err := n.waitReady(done); err != nil {
		log, _ := os.ReadFile(logPath)
		if !n.running() {
			return bytes.Contains(log, []byte("Address already in use")),
				fmt.Errorf("%w: %v\n%s", ErrStart, err, log)
		}
		_ = n.Kill()
		return false, fmt.Errorf("%w: %v\n%s", ErrStart, err, log)
	}
	return false, nil
}

// waitReady polls PING until the server answers with anything but LOADING,
// the process exits, or the start deadline passes.
func (n *Node) waitReady(done chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if n.answers() {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("no answer to PING before the deadline")
		}
		select {
		case <-done:
			return errors.New("server exited")
		case <-tick.C:
		}
	}
}

// answers reports whether this node's own process (not another server that
// holds the port) answers and has finished loading its data.
func (n *Node) answers() bool {
	c, err := dialRaw(n.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.close()
	if n.Opts.Password != "" {
		if _, err := c.do("AUTH", n.Opts.Password); err != nil {
			return false
		}
	}
	reply, err := c.do("PING")
	if err != nil || reply[0] == '-' {
		return false // LOADING, NOAUTH: not ready, or not ours
	}
	info, err := c.do("INFO", "server")
	if err != nil {
		return false
	}
	return bytes.Contains(info, []byte("\r\nprocess_id:"+strconv.Itoa(n.PID())+"\r\n"))
}

// setup applies the ACL lines and writes the brand.
func (n *Node) setup() error {
	c, err := n.admin()
	if err != nil {
		return err
	}
	defer c.close()
	for _, line := range n.Opts.ACL {
		args := append([]string{"ACL", "SETUSER"}, strings.Fields(line)...)
		if err := expectOK(c, args...); err != nil {
			return err
		}
	}
	if n.Opts.NoBrand || n.Opts.ReplicaOf != "" || n.Opts.Sentinel != nil {
		return nil
	}
	switch n.Opts.Role {
	case Scripts:
		reply, err := c.do("SET", VersionKey, n.Opts.Brand, "NX")
		if err != nil {
			return fmt.Errorf("%w: brand: %v", ErrSetup, err)
		}
		if reply[0] == '-' {
			return fmt.Errorf("%w: brand: %s", ErrSetup, bytes.TrimSpace(reply))
		}
	case Module:
		reply, err := c.do("EMQ.INSTALL", "1", VersionKey)
		if err != nil {
			return fmt.Errorf("%w: EMQ.INSTALL: %v", ErrSetup, err)
		}
		if reply[0] != ':' {
			return fmt.Errorf("%w: EMQ.INSTALL: %s", ErrSetup, bytes.TrimSpace(reply))
		}
	}
	return nil
}

// admin opens a raw connection, authenticated when the node has a password.
func (n *Node) admin() (*rawConn, error) {
	c, err := dialRaw(n.Addr, rawTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	if n.Opts.Password != "" {
		if err := expectOK(c, "AUTH", n.Opts.Password); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func expectOK(c *rawConn, args ...string) error {
	reply, err := c.do(args...)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSetup, args[0], err)
	}
	if string(reply) != "+OK\r\n" {
		return fmt.Errorf("%w: %s %s: %s", ErrSetup, args[0], args[1], bytes.TrimSpace(reply))
	}
	return nil
}

// PID returns the server's process id, or 0 when it was never started.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

func (n *Node) running() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Running reports whether the server process is alive.
func (n *Node) Running() bool { return n.running() }

// Stop sends SIGTERM (and SIGCONT, in case the node is frozen), waits for the
// exit, and sends SIGKILL when the stop deadline passes. Stopping a stopped
// node does nothing.
func (n *Node) Stop() error {
	if !n.running() {
		return nil
	}
	_ = n.signal(syscall.SIGTERM)
	_ = n.signal(syscall.SIGCONT)
	if n.wait(stopTimeout) {
		return nil
	}
	return n.Kill()
}

// retire stops the node for good, when nothing will restart it, and gives
// its port back (port.go).
func (n *Node) retire() error {
	err := n.Stop()
	ReleasePort(n.Port)
	return err
}

// Kill sends SIGKILL and waits for the exit.
func (n *Node) Kill() error {
	if !n.running() {
		return nil
	}
	if err := n.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !n.wait(stopTimeout) {
		return fmt.Errorf("%w: pid %d did not exit after SIGKILL", ErrStart, n.PID())
	}
	return nil
}

// Freeze stops the process with SIGSTOP: it keeps its sockets but answers nothing.
func (n *Node) Freeze() error { return n.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process with SIGCONT.
func (n *Node) Thaw() error { return n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) error {
	if !n.running() {
		return ErrStopped
	}
	if err := syscall.Kill(n.PID(), sig); err != nil {
		return fmt.Errorf("node: signal %v to pid %d: %w", sig, n.PID(), err)
	}
	return nil
}

func (n *Node) wait(d time.Duration) bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// serverBinary is the binary opts run: Server, or Debian's redis-server.
func (o Options) serverBinary() (string, error) {
	if o.Server != "" {
		return o.Server, nil
	}
	return serverPath()
}

// serverPath finds redis-server in PATH or /usr/bin.
func serverPath() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", fmt.Errorf("%w: redis-server is neither in PATH nor in /usr/bin", ErrNoServer)
}
