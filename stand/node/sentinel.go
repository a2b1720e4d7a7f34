package node

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// High availability on the stand is the servers' own: a replica is a data
// node started with --replicaof, and a sentinel is the same server binary
// started with --sentinel and a small config file (stand.md, "Replicas and
// Sentinel"). Debian's redis-server 7.0 and Valkey 8 both do it.

// Defaults of a sentinel's monitoring, short for tests: a primary that does
// not answer for DefaultDownAfter is subjectively down; a failover that has
// not finished within DefaultFailoverTimeout is abandoned and retried after
// twice that.
const (
	DefaultQuorum          = 2
	DefaultDownAfter       = time.Second
	DefaultFailoverTimeout = 3 * time.Second
)

// SentinelConfig is what a sentinel monitors: one master, by name.
type SentinelConfig struct {
	// Master is the name the sentinels know the master set by.
	Master string
	// Addr is the master's address (host:port) when the sentinel starts.
	Addr string
	// Quorum is the number of sentinels that must agree the master is
	// down (DefaultQuorum when 0).
	Quorum int
	// DownAfter is down-after-milliseconds (DefaultDownAfter when 0).
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout (DefaultFailoverTimeout when 0).
	FailoverTimeout time.Duration
	// AuthPass is the password the sentinel authenticates to the master
	// and its replicas with ("" when they have none).
	AuthPass string
}

func (c SentinelConfig) withDefaults() SentinelConfig {
	if c.Quorum == 0 {
		c.Quorum = DefaultQuorum
	}
	if c.DownAfter == 0 {
		c.DownAfter = DefaultDownAfter
	}
	if c.FailoverTimeout == 0 {
		c.FailoverTimeout = DefaultFailoverTimeout
	}
	return c
}

// configFile returns the text of the sentinel's config file.
func (c SentinelConfig) configFile() (string, error) {
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil || c.Master == "" || strings.ContainsAny(c.Master, " \t\r\n\"'") {
		return "", fmt.Errorf("%w: sentinel: master %q at %q", ErrStart, c.Master, c.Addr)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sentinel monitor %s %s %s %d\n", c.Master, host, port, c.Quorum)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", c.Master, c.DownAfter.Milliseconds())
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", c.Master, c.FailoverTimeout.Milliseconds())
	fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", c.Master)
	if c.AuthPass != "" {
		fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", c.Master, c.AuthPass)
	}
	return b.String(), nil
}

// haArgs returns the server arguments a replica or a sentinel adds: pre
// goes first (a sentinel's config file must be the first argument), post
// after the stand's own. A sentinel's config file is written into the
// node's dir when it has none: the sentinel rewrites it with what it
// learns (its id, the epochs, the current master), so a restarted
// sentinel keeps its state, as one in production does.
func (o Options) haArgs() (pre, post []string, err error) {
	if o.Sentinel != nil {
		conf := filepath.Join(o.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); errors.Is(err, os.ErrNotExist) {
			text, err := o.Sentinel.withDefaults().configFile()
			if err != nil {
				return nil, nil, err
			}
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				return nil, nil, fmt.Errorf("%w: sentinel config: %v", ErrStart, err)
			}
		}
		pre = []string{conf, "--sentinel"}
	}
	if o.ReplicaOf != "" {
		host, port, err := net.SplitHostPort(o.ReplicaOf)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: replicaof %q: %v", ErrStart, o.ReplicaOf, err)
		}
		post = []string{"--replicaof", host, port}
		if o.Password != "" {
			post = append(post, "--masterauth", o.Password)
		}
	}
	return pre, post, nil
}

// Role reports what the node answers to ROLE: "master", "slave" or
// "sentinel".
func (n *Node) Role() (string, error) {
	c, err := n.admin()
	if err != nil {
		return "", err
	}
	defer c.close()
	reply, err := c.do("ROLE")
	if err != nil {
		return "", err
	}
	// *N\r\n$len\r\n<role>\r\n...
	lines := bytes.SplitN(reply, []byte("\r\n"), 4)
	if len(lines) < 3 || len(reply) == 0 || reply[0] != '*' {
		return "", fmt.Errorf("%w: ROLE answered %q", ErrProtocol, bytes.TrimSpace(reply))
	}
	return string(lines[2]), nil
}

// Replication returns one field of the node's INFO replication
// ("master_link_status", "connected_slaves"), "" when it is absent.
func (n *Node) Replication(field string) (string, error) {
	c, err := n.admin()
	if err != nil {
		return "", err
	}
	defer c.close()
	reply, err := c.do("INFO", "replication")
	if err != nil {
		return "", err
	}
	if reply[0] == '-' {
		return "", fmt.Errorf("%w: INFO replication: %s", ErrProtocol, bytes.TrimSpace(reply))
	}
	for _, line := range strings.Split(string(reply), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", nil
}

// WaitSynced polls until the replica's link to its primary is up (the
// first synchronisation is done) or the timeout passes.
func (n *Node) WaitSynced(timeout time.Duration) error {
	err := poll(timeout, func() (bool, error) {
		v, err := n.Replication("master_link_status")
		return v == "up", err
	}, "replica %s: link to its primary not up", n.Addr)
	if err != nil {
		// What the replica says of its link, for the one who reads the
		// failure.
		var state []string
		for _, f := range []string{"role", "master_host", "master_port", "master_link_status", "master_sync_in_progress", "master_link_down_since_seconds"} {
			v, _ := n.Replication(f)
			state = append(state, f+"="+v)
		}
		err = fmt.Errorf("%w (%s)", err, strings.Join(state, " "))
	}
	return err
}

// poll calls f every pollEvery until it reports done or timeout passes; the
// error then says what was awaited and the last error f returned.
func poll(timeout time.Duration, f func() (bool, error), what string, args ...any) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		done, err := f()
		if done {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf(what, args...)
			if last != nil {
				return fmt.Errorf("%w: %s after %v: %v", ErrSetup, msg, timeout, last)
			}
			return fmt.Errorf("%w: %s after %v", ErrSetup, msg, timeout)
		}
		time.Sleep(pollEvery)
	}
}
