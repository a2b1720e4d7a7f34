package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

const sentinelUpstream = `
upstreams:
  module-a:
    role: module
    password: nodepw
    sentinel:
      master: emq-a
      addresses: ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]
      username: watcher
      password: sentinelpw
      tls:
        enabled: true
        server_name: sentinels.internal
    ack_replicas: 1
    ack_timeout: 250ms
routes:
  - queues: ["*"]
    upstream: module-a
`

func TestSentinelUpstream(t *testing.T) {
	c, err := Load(writeConfig(t, sentinelUpstream), nil)
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams["module-a"]
	s := u.Sentinel
	if u.Address != "" || s.Master != "emq-a" || !slices.Equal(s.Addresses, []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"}) {
		t.Errorf("sentinel section: address %q %+v", u.Address, s)
	}
	if s.Username != "watcher" || s.Password != "sentinelpw" || u.Password != "nodepw" {
		t.Errorf("credentials: sentinel %q/%q, node %q", s.Username, s.Password, u.Password)
	}
	if !s.TLS.Enabled || s.TLS.ServerName != "sentinels.internal" || u.TLS.Enabled {
		t.Errorf("tls: sentinel %+v, node %+v", s.TLS, u.TLS)
	}
	if u.AckReplicas != 1 || u.AckTimeout != 250*time.Millisecond || u.FailoverWait != 5*time.Second {
		t.Errorf("ack %d %v, failover_wait %v (default 5s)", u.AckReplicas, u.AckTimeout, u.FailoverWait)
	}

	// A fixed address: no sentinel, no acknowledgement, the same default wait.
	c, err = Load(writeConfig(t, minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := c.Upstreams["module-a"]; !u.Sentinel.IsZero() || u.AckReplicas != 0 || u.AckTimeout != 0 || u.FailoverWait != 5*time.Second {
		t.Errorf("fixed upstream: %+v", u)
	}
}

func TestSentinelEnvironmentOverrides(t *testing.T) {
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_SENTINEL_ADDRESSES", "10.0.1.1:26379,10.0.1.2:26379")
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_SENTINEL_PASSWORD", "fromenv")
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_ACK_REPLICAS", "2")
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_ACK_TIMEOUT", "1s")
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_FAILOVER_WAIT", "0s")
	body := strings.Replace(sentinelUpstream, "      password: sentinelpw\n", "", 1)
	body = strings.Replace(body, "    ack_replicas: 1\n    ack_timeout: 250ms\n", "", 1)
	c, err := Load(writeConfig(t, body), nil)
	if err != nil {
		t.Fatal(err)
	}
	u := c.Upstreams["module-a"]
	if !slices.Equal(u.Sentinel.Addresses, []string{"10.0.1.1:26379", "10.0.1.2:26379"}) || u.Sentinel.Password != "fromenv" {
		t.Errorf("sentinel overrides: %+v", u.Sentinel)
	}
	if u.AckReplicas != 2 || u.AckTimeout != time.Second || u.FailoverWait != 0 {
		t.Errorf("ack %d %v failover_wait %v", u.AckReplicas, u.AckTimeout, u.FailoverWait)
	}
}

func TestSentinelValidation(t *testing.T) {
	fixed := "    address: \"127.0.0.1:6390\"\n"
	tests := []struct {
		name    string
		body    string
		wantKey string
		want    string
	}{
		{"both", strings.Replace(sentinelUpstream, "    role: module\n", "    role: module\n"+fixed, 1), "upstreams.module-a", "mutually exclusive"},
		{"a sentinel key beside address", strings.Replace(minimal, "    role: module\n", "    role: module\n    sentinel:\n      password: x\n", 1), "upstreams.module-a", "mutually exclusive"},
		{"neither", strings.Replace(minimal, fixed, "", 1), "upstreams.module-a.address", "set address, or sentinel"},
		{"no master", strings.Replace(sentinelUpstream, "      master: emq-a\n", "", 1), "upstreams.module-a.sentinel.master", "is empty"},
		{"master with a space", strings.Replace(sentinelUpstream, "master: emq-a", `master: "emq a"`, 1), "upstreams.module-a.sentinel.master", "space"},
		{"no addresses", strings.Replace(sentinelUpstream, `addresses: ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]`, "addresses: []", 1), "upstreams.module-a.sentinel.addresses", "is empty"},
		{"bad address", strings.Replace(sentinelUpstream, `"10.0.0.2:26379"`, `"10.0.0.2"`, 1), "upstreams.module-a.sentinel.addresses[1]", "not host:port"},
		{"address twice", strings.Replace(sentinelUpstream, `"10.0.0.3:26379"`, `"10.0.0.1:26379"`, 1), "upstreams.module-a.sentinel.addresses[2]", "given twice"},
		{"sentinel cert without key", strings.Replace(sentinelUpstream, "        enabled: true\n", "        enabled: true\n        cert: /c.pem\n", 1), "upstreams.module-a.sentinel.tls", "together"},
		{"negative ack_replicas", strings.Replace(sentinelUpstream, "ack_replicas: 1", "ack_replicas: -1", 1), "upstreams.module-a.ack_replicas", "negative"},
		{"ack without timeout", strings.Replace(sentinelUpstream, "    ack_timeout: 250ms\n", "", 1), "upstreams.module-a.ack_timeout", "must be positive when ack_replicas is 1"},
		{"negative ack_timeout", strings.Replace(sentinelUpstream, "ack_timeout: 250ms", "ack_timeout: -1s", 1), "upstreams.module-a.ack_timeout", "negative"},
		{"ack_timeout past the reply timeout", strings.Replace(sentinelUpstream, "ack_timeout: 250ms", "ack_timeout: 10s", 1), "upstreams.module-a.ack_timeout", "must be shorter than timeouts.upstream (5s)"},
		{"negative failover_wait", strings.Replace(minimal, "    role: module\n", "    role: module\n    failover_wait: -1s\n", 1), "upstreams.module-a.failover_wait", "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, tt.body), nil)
			if err == nil {
				t.Fatal("Load accepted a bad value")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantKey+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name key %q with %q", err, tt.wantKey, tt.want)
			}
		})
	}
}
