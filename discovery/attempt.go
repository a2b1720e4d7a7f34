package discovery

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// attempt finds a primary once: the address of the last +switch-master
// message first, then each sentinel's answer in turn, every candidate
// checked with ROLE. The first candidate that answers master wins, and the
// sentinel that named it moves to the front of the list. The error joins
// every reason (a sentinel that did not answer, a candidate refused).
func (r *Resolver) attempt() (string, error) {
	var errs []error
	checked := make(map[string]bool, len(r.order)+1)
	r.mu.Lock()
	hint := r.hint
	r.hint = ""
	r.mu.Unlock()
	if hint != "" {
		checked[hint] = true
		err := r.checkRole(hint)
		if err == nil {
			return hint, nil
		}
		errs = append(errs, fmt.Errorf("+switch-master named %s: %w", hint, err))
	}
	for i, s := range r.order {
		addr, err := r.ask(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("sentinel %s: %w", s, err))
			continue
		}
		if checked[addr] {
			continue
		}
		checked[addr] = true
		if err := r.checkRole(addr); err != nil {
			errs = append(errs, fmt.Errorf("sentinel %s named %s: %w", s, addr, err))
			continue
		}
		if i > 0 {
			r.order = append(append([]string{s}, r.order[:i]...), r.order[i+1:]...)
		}
		return addr, nil
	}
	return "", reasons(errs)
}

// reasons is the error of a failed attempt: every reason, on one line
// (one log line per attempt), each one reachable by errors.Is.
type reasons []error

func (rs reasons) Error() string {
	parts := make([]string, len(rs))
	for i, e := range rs {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (rs reasons) Unwrap() []error { return rs }

// ask asks one sentinel for the master's address.
func (r *Resolver) ask(sentinel string) (string, error) {
	c, ok := r.clients[sentinel]
	if !ok {
		var err error
		if c, err = valkey.NewClient(r.opts.sentinelClientOption(sentinel)); err != nil {
			return "", err
		}
		r.clients[sentinel] = c
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
	defer cancel()
	hp, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(r.opts.Master).Build()).AsStrSlice()
	if valkey.IsValkeyNil(err) {
		return "", fmt.Errorf("%w %s", ErrUnknownMaster, r.opts.Master)
	}
	if err != nil {
		return "", err
	}
	if len(hp) != 2 || hp[0] == "" || hp[1] == "" {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s answered %q", r.opts.Master, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// checkRole checks that a candidate answers ROLE with master, on a
// connection made with the node's credentials. The connection to the last
// candidate that passed is kept for the next check (the periodic refresh
// checks the same primary again and again); any other is closed after it.
func (r *Resolver) checkRole(addr string) error {
	c := r.roleClient
	if c == nil || r.roleAddr != addr {
		var err error
		if c, err = valkey.NewClient(r.opts.nodeClientOption(addr)); err != nil {
			return err
		}
	}
	err := r.role(c, addr)
	switch {
	case err == nil && c != r.roleClient:
		if r.roleClient != nil {
			r.roleClient.Close()
		}
		r.roleClient, r.roleAddr = c, addr
	case err != nil && c == r.roleClient:
		c.Close()
		r.roleClient, r.roleAddr = nil, ""
	case err != nil:
		c.Close()
	}
	return err
}

// role sends ROLE and checks the answer.
func (r *Resolver) role(c valkey.Client, addr string) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
	defer cancel()
	reply, err := c.Do(ctx, c.B().Role().Build()).ToArray()
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if len(reply) == 0 {
		return fmt.Errorf("ROLE answered an empty array")
	}
	role, err := reply[0].ToString()
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if role != "master" {
		r.refusals.Add(1)
		return fmt.Errorf("%w: %s answers ROLE %s", ErrNotPrimary, addr, role)
	}
	return nil
}

// switchChannel is the channel a sentinel announces a new primary on:
// "<master name> <old ip> <old port> <new ip> <new port>".
const switchChannel = "+switch-master"

// parseSwitch returns the new primary of a +switch-master message for
// master, and false for a message about another master set or one that
// is not shaped like the announcement.
func parseSwitch(master, message string) (string, bool) {
	f := strings.Fields(message)
	if len(f) != 5 || f[0] != master {
		return "", false
	}
	return net.JoinHostPort(f[3], f[4]), true
}
