package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// HAOptions describe a stand with high availability: a primary, one
// replica of it and a few sentinels monitoring the pair.
type HAOptions struct {
	// Server is the server binary of every process ("" = Debian's redis-server).
	Server string
	// Role is the role of the primary (Module: the replica loads the module
	// too, so a promoted replica serves the verbs).
	Role Role
	// Master is the master set's name (DefaultMaster when "").
	Master string
	// Password is requirepass of the primary and the replica (and what the
	// sentinels authenticate to them with).
	Password string
	// Sentinels is the number of sentinels (3 when 0).
	Sentinels int
	// Quorum, DownAfter and FailoverTimeout are the sentinels' monitoring
	// settings (SentinelConfig's defaults when 0).
	Quorum          int
	DownAfter       time.Duration
	FailoverTimeout time.Duration
	// Dir holds a directory per process ("" = a new temp dir).
	Dir string
}

// DefaultMaster is the master set's name on the stand.
const DefaultMaster = "emq"

// HA is a running primary, its replica and the sentinels.
type HA struct {
	Master    string
	Primary   *Node // the primary at start
	Replica   *Node // its replica at start
	Sentinels []*Node
	Opts      HAOptions // defaults filled in
}

// haTimeout bounds each wait of the HA stand (monitoring, promotion).
const haTimeout = 60 * time.Second

// StartHA starts the primary, the replica (synchronised before it
// returns) and the sentinels, and waits until every sentinel monitors the
// replica and knows every other sentinel (WaitMonitored), so a failover can
// happen from the moment it returns. On error every process it started is
// stopped.
func StartHA(o HAOptions) (h *HA, err error) {
	if o.Master == "" {
		o.Master = DefaultMaster
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	cfg := SentinelConfig{Quorum: o.Quorum, DownAfter: o.DownAfter, FailoverTimeout: o.FailoverTimeout}.withDefaults()
	o.Quorum, o.DownAfter, o.FailoverTimeout = cfg.Quorum, cfg.DownAfter, cfg.FailoverTimeout
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "emqha-"); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	h = &HA{Master: o.Master, Opts: o}
	defer func() {
		if err != nil {
			_ = h.Stop()
			h = nil
		}
	}()
	sub := func(name string) (string, error) {
		d := filepath.Join(o.Dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("%w: %v", ErrStart, err)
		}
		return d, nil
	}
	dir, err := sub("primary")
	if err != nil {
		return h, err
	}
	if h.Primary, err = Start(Options{Role: o.Role, Server: o.Server, Password: o.Password, Dir: dir}); err != nil {
		return h, err
	}
	if dir, err = sub("replica"); err != nil {
		return h, err
	}
	h.Replica, err = Start(Options{Role: o.Role, Server: o.Server, Password: o.Password, Dir: dir, ReplicaOf: h.Primary.Addr})
	if err != nil {
		return h, err
	}
	if err := h.Replica.WaitSynced(haTimeout); err != nil {
		return h, err
	}
	for i := range o.Sentinels {
		if dir, err = sub("sentinel-" + strconv.Itoa(i+1)); err != nil {
			return h, err
		}
		s, err := Start(Options{Role: Bare, Server: o.Server, Dir: dir, Sentinel: &SentinelConfig{
			Master: o.Master, Addr: h.Primary.Addr, Quorum: o.Quorum,
			DownAfter: o.DownAfter, FailoverTimeout: o.FailoverTimeout, AuthPass: o.Password,
		}})
		if err != nil {
			return h, err
		}
		h.Sentinels = append(h.Sentinels, s)
		// Rejoin waits for the sentinels to see a replica's priority; at
		// their default INFO period (10 s) that wait alone would take
		// longer than most failovers on the stand.
		if err := expectSentinelOK(s.Addr, "SENTINEL", "DEBUG", "INFO-PERIOD", strconv.Itoa(int(sentinelInfoPeriod.Milliseconds()))); err != nil {
			return h, err
		}
	}
	return h, h.WaitMonitored(haTimeout)
}

// sentinelInfoPeriod is how often the stand's sentinels send INFO to the
// nodes they monitor (SENTINEL DEBUG INFO-PERIOD; Sentinel's own default
// is 10 s): how soon they see a replica's priority change (Rejoin).
const sentinelInfoPeriod = time.Second

// expectSentinelOK sends a command to the sentinel at addr and requires +OK.
func expectSentinelOK(addr string, args ...string) error {
	c, err := dialRaw(addr, rawTimeout)
	if err != nil {
		return fmt.Errorf("%w: sentinel %s: %v", ErrSetup, addr, err)
	}
	defer c.close()
	return expectOK(c, args...)
}

// Rejoin restarts n, a node of the set that died, with o (its Role and
// Server; ReplicaOf the master's address), and returns once n holds the
// master's data and the sentinels may promote it.
//
// The sentinels consider a replica for promotion as soon as they have its
// INFO, whether or not its first synchronisation is done; on a loaded
// machine (down-after is a second on the stand) they can fail the set
// over to a node still loading it, and the set loses its data: the
// promoted node is empty, and the old master, now its replica, empties
// itself too. (The proxy's fence then refuses the empty node, as it
// must.) So n starts with replica-priority 0, which the sentinels never
// promote; once its link to the master is up (the synchronisation loaded)
// it gets the default priority back, and Rejoin waits until every
// sentinel has seen that, so a failover can pick it from then on, as
// operators do when they bring a node back.
func (h *HA) Rejoin(n *Node, o Options, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if o.Password == "" {
		o.Password = h.Opts.Password // the set's nodes share it
	}
	o.Args = append(append([]string(nil), o.Args...), "--replica-priority", "0")
	if err := n.Restart(o); err != nil {
		return err
	}
	if err := n.WaitSynced(time.Until(deadline)); err != nil {
		return err
	}
	c, err := n.admin()
	if err != nil {
		return err
	}
	err = expectOK(c, "CONFIG", "SET", "replica-priority", strconv.Itoa(defaultReplicaPriority))
	c.close()
	if err != nil {
		return err
	}
	want := strconv.Itoa(defaultReplicaPriority)
	return h.eachSentinel(time.Until(deadline), fmt.Sprintf("sentinels do not all see replica %s with priority %s", n.Addr, want),
		func(ctx context.Context, c valkey.Client) (bool, error) {
			replicas, err := c.Do(ctx, c.B().SentinelReplicas().Master(h.Master).Build()).ToArray()
			if err != nil {
				return false, err
			}
			for _, r := range replicas {
				m, err := r.AsStrMap()
				if err != nil {
					return false, err
				}
				if net.JoinHostPort(m["ip"], m["port"]) == n.Addr {
					return m["slave-priority"] == want, nil
				}
			}
			return false, nil
		})
}

// defaultReplicaPriority is the servers' default replica-priority.
const defaultReplicaPriority = 100

// Stop stops every process of the stand for good (a killed one is already
// stopped) and gives their ports back (port.go); it returns the errors.
func (h *HA) Stop() error {
	var errs []error
	for _, n := range append(append([]*Node(nil), h.Sentinels...), h.Replica, h.Primary) {
		if n != nil {
			errs = append(errs, n.retire())
		}
	}
	return errors.Join(errs...)
}

// SentinelAddrs returns the sentinels' addresses.
func (h *HA) SentinelAddrs() []string {
	out := make([]string, len(h.Sentinels))
	for i, s := range h.Sentinels {
		out[i] = s.Addr
	}
	return out
}

// WaitMonitored waits until every sentinel names the primary, lists the
// replica with its link to the primary up and not down, and knows every
// other sentinel. Sentinels learn of each other through hello messages on
// the primary every two seconds, so this takes a few seconds.
func (h *HA) WaitMonitored(timeout time.Duration) error {
	return h.eachSentinel(timeout, "sentinels do not all monitor the replica and each other", func(ctx context.Context, c valkey.Client) (bool, error) {
		addr, err := masterAddr(ctx, c, h.Master)
		if err != nil || addr != h.Primary.Addr {
			return false, err
		}
		replicas, err := c.Do(ctx, c.B().SentinelReplicas().Master(h.Master).Build()).ToArray()
		if err != nil {
			return false, err
		}
		seen := false
		for _, r := range replicas {
			m, err := r.AsStrMap()
			if err != nil {
				return false, err
			}
			if net.JoinHostPort(m["ip"], m["port"]) == h.Replica.Addr &&
				m["master-link-status"] == "ok" && !strings.Contains(m["flags"], "down") {
				seen = true
			}
		}
		if !seen {
			return false, nil
		}
		others, err := c.Do(ctx, c.B().SentinelSentinels().Master(h.Master).Build()).ToArray()
		return err == nil && len(others) == len(h.Sentinels)-1, err
	})
}

// KillPrimary kills the primary with SIGKILL: no shutdown, no last write
// to its replica.
func (h *HA) KillPrimary() error { return h.Primary.Kill() }

// WaitPromoted waits until a sentinel names the replica as the master and
// the replica answers ROLE with master, and returns the promoted node:
// the first moment a client that asks the sentinels and checks ROLE can
// find the new primary.
func (h *HA) WaitPromoted(timeout time.Duration) (*Node, error) {
	if err := h.WaitNamed(h.Replica, timeout); err != nil {
		return nil, err
	}
	return h.Replica, nil
}

// WaitNamed waits until a sentinel names n (either node of the set) as
// the master and n answers ROLE with master: after a failover back to the
// first primary as well as after the first one (WaitPromoted).
func (h *HA) WaitNamed(n *Node, timeout time.Duration) error {
	clients, err := h.sentinelClients()
	if err != nil {
		return err
	}
	defer closeAll(clients)
	return poll(timeout, func() (bool, error) {
		var last error
		for _, c := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			addr, err := masterAddr(ctx, c, h.Master)
			cancel()
			if err != nil {
				last = err
				continue
			}
			if addr == n.Addr {
				role, err := n.Role()
				return role == "master", err
			}
		}
		return false, last
	}, "no sentinel names %s as master %s", n.Addr, h.Master)
}

// eachSentinel polls until cond holds on every sentinel.
func (h *HA) eachSentinel(timeout time.Duration, what string, cond func(context.Context, valkey.Client) (bool, error)) error {
	clients, err := h.sentinelClients()
	if err != nil {
		return err
	}
	defer closeAll(clients)
	return poll(timeout, func() (bool, error) {
		for _, c := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ok, err := cond(ctx, c)
			cancel()
			if !ok {
				return false, err
			}
		}
		return true, nil
	}, "%s", what)
}

// sentinelClients opens a valkey-go client to each sentinel.
func (h *HA) sentinelClients() ([]valkey.Client, error) {
	var out []valkey.Client
	for _, s := range h.Sentinels {
		c, err := valkey.NewClient(valkey.ClientOption{
			InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
			ClientSetInfo: valkey.DisableClientSetInfo,
		})
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("%w: sentinel %s: %v", ErrSetup, s.Addr, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func closeAll(cs []valkey.Client) {
	for _, c := range cs {
		c.Close()
	}
}

// masterAddr asks a sentinel for the master's address.
func masterAddr(ctx context.Context, c valkey.Client, master string) (string, error) {
	hp, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(master).Build()).AsStrSlice()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("%w: SENTINEL GET-MASTER-ADDR-BY-NAME %s answered %q", ErrProtocol, master, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// WaitWhole waits until the master set is whole again, whichever of its two
// nodes the sentinels chose: every sentinel that answers names the same
// node master, that node answers ROLE with master, and the other node's
// link to it is up. It returns the master. A test that restarts a killed
// primary as a replica waits with it rather than with that node's
// WaitSynced: on a loaded machine the sentinels may fail over once more
// (down-after is a second on the stand), and then the restarted node is
// the master.
func (h *HA) WaitWhole(timeout time.Duration) (*Node, error) {
	clients, err := h.sentinelClients()
	if err != nil {
		return nil, err
	}
	defer closeAll(clients)
	var master *Node
	err = poll(timeout, func() (bool, error) {
		var named string
		for _, c := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			addr, err := masterAddr(ctx, c, h.Master)
			cancel()
			if err != nil {
				continue
			}
			if named != "" && addr != named {
				return false, nil // the sentinels do not agree yet
			}
			named = addr
		}
		var other *Node
		switch named {
		case h.Primary.Addr:
			master, other = h.Primary, h.Replica
		case h.Replica.Addr:
			master, other = h.Replica, h.Primary
		default:
			return false, nil
		}
		if role, err := master.Role(); err != nil || role != "master" {
			return false, nil
		}
		host, _ := other.Replication("master_host")
		port, _ := other.Replication("master_port")
		link, err := other.Replication("master_link_status")
		return link == "up" && net.JoinHostPort(host, port) == master.Addr, err
	}, "master set %s not whole (a master and its replica's link up)", h.Master)
	if err != nil {
		return nil, err
	}
	return master, nil
}
