package config

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultFailoverWait is how long new commands wait for an upstream's new
// primary when the upstream does not set failover_wait.
const DefaultFailoverWait = 5 * time.Second

// Sentinel names an upstream's master set under Sentinel and how to reach
// the sentinels (the nodes themselves are reached with the upstream's own
// username, password and tls).
type Sentinel struct {
	Master    string      `mapstructure:"master"`
	Addresses []string    `mapstructure:"addresses"`
	Username  string      `mapstructure:"username"`
	Password  string      `mapstructure:"password"`
	TLS       UpstreamTLS `mapstructure:"tls"`
}

// IsZero reports whether no key of the section is set.
func (s Sentinel) IsZero() bool {
	return s.Master == "" && len(s.Addresses) == 0 && s.Username == "" && s.Password == "" && s.TLS == UpstreamTLS{}
}

// validateSource checks that an upstream names exactly one of a fixed
// address and a master set under Sentinel, and checks the one it names.
func validateSource(p *problems, key string, u Upstream) {
	switch {
	case u.Address != "" && !u.Sentinel.IsZero():
		p.bad(key, "address and sentinel are mutually exclusive: address names a fixed node, sentinel a master set whose primary the sentinels give; set one")
	case u.Address == "" && u.Sentinel.IsZero():
		p.bad(key+".address", "is empty (set address, or sentinel: {master, addresses} for a master set under Sentinel)")
	case u.Address != "":
		p.nodeAddr(key+".address", u.Address)
	default:
		validateSentinel(p, key+".sentinel", u.Sentinel)
	}
}

// validateSentinel checks an upstream's sentinel section.
func validateSentinel(p *problems, key string, s Sentinel) {
	switch {
	case s.Master == "":
		p.bad(key+".master", "is empty (the name the sentinels monitor the master set by)")
	case strings.ContainsFunc(s.Master, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		p.bad(key+".master", "%q holds a space or a control character, which no Sentinel master name can", s.Master)
	}
	if len(s.Addresses) == 0 {
		p.bad(key+".addresses", "is empty (the sentinels' host:port addresses)")
	}
	seen := make(map[string]bool, len(s.Addresses))
	for i, a := range s.Addresses {
		k := fmt.Sprintf("%s.addresses[%d]", key, i)
		p.addr(k, a, false)
		if seen[a] {
			p.bad(k, "%q is given twice", a)
		}
		seen[a] = true
	}
	if (s.TLS.CertFile == "") != (s.TLS.KeyFile == "") {
		p.bad(key+".tls", "cert and key must be set together")
	}
}

// validateFailover checks how long new commands wait for a new primary
// and the replica acknowledgement of writes (checkAck).
func validateFailover(p *problems, key string, u Upstream) {
	if u.FailoverWait < 0 {
		p.bad(key+".failover_wait", "%v is negative (0: new commands get the error at once)", u.FailoverWait)
	}
}

// validateAckTimeout checks the upstream's replica acknowledgement of
// writes against the reply timeout, timeouts.upstream (checkAck).
func validateAckTimeout(p *problems, key string, u Upstream, upstream time.Duration) {
	checkAck(p, key, u.AckReplicas, u.AckTimeout, "timeouts.upstream", upstream)
}

// CheckAck checks an upstream's replica acknowledgement of writes: the
// rule of the configuration's ack_replicas and ack_timeout, which package
// proxy applies to the upstream options it is given too (proxy.New). key
// names the upstream (its keys are key.ack_replicas and key.ack_timeout),
// replyKey the reply timeout reply is the value of. Every problem is named
// in the error, which wraps ErrInvalid; nil when the values are usable.
func CheckAck(key string, replicas int, timeout time.Duration, replyKey string, reply time.Duration) error {
	var p problems
	checkAck(&p, key, replicas, timeout, replyKey, reply)
	return errors.Join(p.errs...)
}

// checkAck: the number of replicas and the timeout are not negative, the
// timeout is positive when replicas are waited for, and a WAIT for them
// ends before the reply timeout (0: not checked), which would otherwise
// break the connection as a node that stopped answering.
func checkAck(p *problems, key string, replicas int, timeout time.Duration, replyKey string, reply time.Duration) {
	if replicas < 0 {
		p.bad(key+".ack_replicas", "%d is negative", replicas)
	}
	switch {
	case timeout < 0:
		p.bad(key+".ack_timeout", "%v is negative", timeout)
	case replicas > 0 && timeout == 0:
		p.bad(key+".ack_timeout", "must be positive when ack_replicas is %d: it bounds how long a write waits for its replicas", replicas)
	case replicas > 0 && reply > 0 && timeout >= reply:
		p.bad(key+".ack_timeout", "%v must be shorter than %s (%v): a WAIT that long would break the connection as a node that stopped answering", timeout, replyKey, reply)
	}
}
