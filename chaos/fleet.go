package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// The fleet's names.
const (
	ModuleA  = "module-a"
	ModuleB  = "module-b"
	ScriptsC = "scripts-c"
)

// Queues are the four kinds of queue the workers use: a campaign's queues
// are these names with the campaign's suffix ("alpha1"), routed by the
// configuration file with a glob ("alpha*") to the upstream FileRoutes
// names; delta falls to the default route.
var Queues = []string{"alpha", "bravo", "charlie", "delta"}

// FileRoutes is the configuration's route of each kind of queue.
var FileRoutes = map[string]string{"alpha": ModuleA, "bravo": ModuleB, "charlie": ScriptsC, "delta": ModuleA}

// Upstreams are the fleet's upstream names.
var Upstreams = []string{ModuleA, ModuleB, ScriptsC}

// MasterSet is a module primary with its replica under three sentinels.
type MasterSet struct {
	Name   string // the upstream's name
	Master string // the sentinels' name of the master set
	HA     *node.HA
	Nodes  [2]*node.Node // the primary at start, its replica at start
}

// Sidecar is one emqproxy serve process.
type Sidecar struct {
	N      int    // 1-based
	Listen string // the sidecar's own listener
	Admin  string
	Relay  *toxiproxy.Proxy // workers reach the sidecar through it
	// Scripts is the relay between this sidecar and the scripts node.
	Scripts *toxiproxy.Proxy
	cfg     string
	dir     string
	bin     string

	mu  sync.Mutex
	cmd *exec.Cmd
	log *os.File
}

// Fleet is everything a campaign runs against.
type Fleet struct {
	Dir      string
	Bin      string
	Server   string // the server binary ("" = Debian's redis-server)
	Map      *shamap.Map
	MapPath  string
	Sets     []*MasterSet
	Scripts  *node.Node
	Sidecars []*Sidecar
	MoverCfg string
	noAck    bool
	tox      *toxiproxy.ApiServer
}

// FleetOptions configure StartFleet.
type FleetOptions struct {
	Dir       string // everything lives under it
	Bin       string // the emqproxy binary
	Server    string // "" = Debian's redis-server
	Sidecars  int    // 3 when 0
	DownAfter time.Duration
	// AckReplicas is the module upstreams' ack_replicas (1 unless
	// NoAck: the "broken build" check runs without WAIT).
	NoAck bool
	// Log receives the relays' (toxiproxy's) log lines at debug level
	// (nil = none).
	Log *zap.Logger
}

// StartFleet starts the nodes, the sentinels, the relays and the
// sidecars on free loopback ports. On error what it started is stopped.
func StartFleet(o FleetOptions) (f *Fleet, err error) {
	if o.Sidecars == 0 {
		o.Sidecars = 3
	}
	if o.DownAfter == 0 {
		o.DownAfter = 1500 * time.Millisecond
	}
	f = &Fleet{Dir: o.Dir, Bin: o.Bin, Server: o.Server, noAck: o.NoAck}
	f.tox = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), toxiLogger(o.Log))
	defer func() {
		if err != nil {
			f.Stop()
			f = nil
		}
	}()
	f.MapPath = filepath.Join(o.Dir, "map.yaml")
	src, err := os.ReadFile(filepath.Join(node.RepoRoot(), "stand", "map.yaml"))
	if err != nil {
		return f, err
	}
	if err := os.WriteFile(f.MapPath, src, 0o644); err != nil {
		return f, err
	}
	if f.Map, err = shamap.Load(f.MapPath); err != nil {
		return f, err
	}
	if _, err := node.BuildModule(); err != nil {
		return f, err
	}
	for i, name := range []string{ModuleA, ModuleB} {
		h, err := node.StartHA(node.HAOptions{
			Server: o.Server, Role: node.Module, Master: fmt.Sprintf("emq%c", 'a'+i),
			DownAfter: o.DownAfter, FailoverTimeout: 4 * time.Second, Dir: filepath.Join(o.Dir, name),
		})
		if err != nil {
			return f, fmt.Errorf("chaos: %s: %w", name, err)
		}
		s := &MasterSet{Name: name, Master: h.Master, HA: h, Nodes: [2]*node.Node{h.Primary, h.Replica}}
		f.Sets = append(f.Sets, s)
		for _, n := range s.Nodes {
			if err := quickSync(n); err != nil {
				return f, err
			}
		}
	}
	sdir := filepath.Join(o.Dir, ScriptsC)
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return f, err
	}
	if f.Scripts, err = node.Start(node.Options{Role: node.Scripts, Brand: f.Map.LegacyBrand, Server: o.Server, Dir: sdir}); err != nil {
		return f, err
	}
	if err := quickSync(f.Scripts); err != nil {
		return f, err
	}
	if f.MoverCfg, err = f.writeConfig(filepath.Join(o.Dir, "mover.yaml"), "127.0.0.1:0", "127.0.0.1:0", f.Scripts.Addr, ""); err != nil {
		return f, err
	}
	for i := 1; i <= o.Sidecars; i++ {
		sc := &Sidecar{N: i, dir: filepath.Join(o.Dir, fmt.Sprintf("sidecar%d", i)), bin: o.Bin}
		if err := os.MkdirAll(sc.dir, 0o755); err != nil {
			return f, err
		}
		if sc.Listen, err = freeAddr(); err != nil {
			return f, err
		}
		if sc.Admin, err = freeAddr(); err != nil {
			return f, err
		}
		if sc.Scripts, err = f.relay(fmt.Sprintf("sidecar%d-scripts", i), f.Scripts.Addr); err != nil {
			return f, err
		}
		if sc.Relay, err = f.relay(fmt.Sprintf("workers-sidecar%d", i), sc.Listen); err != nil {
			return f, err
		}
		if sc.cfg, err = f.writeConfig(filepath.Join(sc.dir, "emqproxy.yaml"), sc.Listen, sc.Admin, sc.Scripts.Listen, filepath.Join(sc.dir, "audit.log")); err != nil {
			return f, err
		}
		f.Sidecars = append(f.Sidecars, sc)
		if err := sc.Start(); err != nil {
			return f, err
		}
	}
	for _, sc := range f.Sidecars {
		if err := sc.WaitReady(30 * time.Second); err != nil {
			return f, err
		}
	}
	return f, nil
}

// quickSync makes a new replica's full synchronisation start at once
// (the server's default waits 5 s for more replicas).
func quickSync(n *node.Node) error {
	c, err := dial(n.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Do(context.Background(), c.B().ConfigSet().ParameterValue().ParameterValue("repl-diskless-sync-delay", "0").Build()).Error()
}

func (f *Fleet) relay(name, upstream string) (*toxiproxy.Proxy, error) {
	for range 8 {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		p := toxiproxy.NewProxy(f.tox, name, addr, upstream)
		if err := p.Start(); err == nil {
			if err := f.tox.Collection.Add(p, false); err != nil {
				p.Stop()
				return nil, err
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("chaos: relay %s: no free port", name)
}

// writeConfig writes a sidecar's (or the mover's) configuration: the
// module master sets through their sentinels with ack_replicas 1, the
// scripts node at scriptsAddr, the control table on.
func (f *Fleet) writeConfig(path, listen, admin, scriptsAddr, audit string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\nmap: %q\nupstreams:\n", listen, f.MapPath)
	ack := 1
	if f.noAck {
		ack = 0
	}
	for _, s := range f.Sets {
		fmt.Fprintf(&b, "  %s:\n    role: module\n    sentinel:\n      master: %s\n      addresses: [\"%s\"]\n    failover_wait: 5s\n    ack_replicas: %d\n    ack_timeout: 500ms\n",
			s.Name, s.Master, strings.Join(s.HA.SentinelAddrs(), `", "`), ack)
	}
	fmt.Fprintf(&b, "  %s:\n    role: scripts\n    address: %q\n", ScriptsC, scriptsAddr)
	fmt.Fprintf(&b, "routes:\n")
	for _, q := range Queues[:3] {
		fmt.Fprintf(&b, "  - queues: [%q]\n    upstream: %s\n", q+"*", FileRoutes[q])
	}
	fmt.Fprintf(&b, "  - queues: [\"*\"]\n    upstream: %s\n", ModuleA)
	fmt.Fprintf(&b, "control:\n  enabled: true\n  poll: 100ms\n  lease: 1s\n")
	fmt.Fprintf(&b, "timeouts:\n  dial: 1s\n  upstream: 2s\n  drain: 1s\n  hold: 3s\n  probe: 500ms\n")
	fmt.Fprintf(&b, "admin:\n  listen: %q\nlog:\n  level: warn\n", admin)
	if audit != "" {
		fmt.Fprintf(&b, "audit:\n  sink: %q\n", audit)
	}
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// Start starts the sidecar's process (again, on the same ports).
func (sc *Sidecar) Start() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(sc.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(sc.bin, "serve", "--config", sc.cfg)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("chaos: sidecar %d: %w", sc.N, err)
	}
	sc.cmd, sc.log = cmd, log
	return nil
}

// Signal sends sig to the sidecar's process.
func (sc *Sidecar) Signal(sig syscall.Signal) error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.cmd == nil {
		return errors.New("chaos: sidecar not running")
	}
	return sc.cmd.Process.Signal(sig)
}

// Kill kills the sidecar with SIGKILL and waits for it.
func (sc *Sidecar) Kill() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.cmd == nil {
		return nil
	}
	_ = sc.cmd.Process.Signal(syscall.SIGCONT)
	err := sc.cmd.Process.Kill()
	_, _ = sc.cmd.Process.Wait()
	_ = sc.log.Close()
	sc.cmd = nil
	return err
}

// Ready reports whether /readyz answers 200.
func (sc *Sidecar) Ready() bool {
	cl := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := cl.Get("http://" + sc.Admin + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady waits until the sidecar is ready.
func (sc *Sidecar) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !sc.Ready() {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(sc.dir, "stderr.log"))
			return fmt.Errorf("chaos: sidecar %d not ready after %v:\n%s", sc.N, timeout, tail(b, 2048))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Primary asks the set's sentinels for the primary and returns that node.
func (s *MasterSet) Primary() (*node.Node, error) {
	var last error
	for _, sn := range s.HA.Sentinels {
		if !sn.Running() {
			continue
		}
		c, err := dial(sn.Addr)
		if err != nil {
			last = err
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		hp, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(s.Master).Build()).AsStrSlice()
		cancel()
		c.Close()
		if err != nil || len(hp) != 2 {
			last = fmt.Errorf("sentinel %s: %v %q", sn.Addr, err, hp)
			continue
		}
		addr := net.JoinHostPort(hp[0], hp[1])
		for _, n := range s.Nodes {
			if n.Addr == addr {
				return n, nil
			}
		}
		return nil, fmt.Errorf("chaos: %s: the sentinels name %s, no node of the set", s.Name, addr)
	}
	return nil, fmt.Errorf("chaos: %s: no sentinel names a primary: %v", s.Name, last)
}

// Other returns the set's node that is not n.
func (s *MasterSet) Other(n *node.Node) *node.Node {
	if s.Nodes[0] == n {
		return s.Nodes[1]
	}
	return s.Nodes[0]
}

// Stop stops every process and relay of the fleet.
func (f *Fleet) Stop() {
	for _, sc := range f.Sidecars {
		_ = sc.Kill()
	}
	if f.tox != nil {
		f.tox.Collection.Clear()
	}
	for _, s := range f.Sets {
		for _, n := range s.Nodes {
			_ = n.Thaw()
		}
		_ = s.HA.Stop()
	}
	if f.Scripts != nil {
		_ = f.Scripts.Stop()
	}
}

// freeAddr is an address for a sidecar or a relay, which the nemesis stops
// and starts again on it: one of the stand's ports (node.FreePort).
func freeAddr() (string, error) { return node.FreeAddr() }

// dial opens a plain valkey-go client to one address.
func dial(addr string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true, DisableRetry: true,
		ClientSetInfo: valkey.DisableClientSetInfo, Dialer: net.Dialer{Timeout: time.Second},
	})
}
