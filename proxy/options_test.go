package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/rewrite"
)

// TestOptionsTakeTheConfigurationsDefaultsAndRules: Options built without
// a file get the configuration's defaults, and are refused by its rules
// for replica acknowledgement and routes. The upstream's address is one
// nothing listens on: New only starts connecting.
func TestOptionsTakeTheConfigurationsDefaultsAndRules(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	s, err := New(Options{Upstream: UpstreamOptions{Name: "a", Address: nowhere, ProbeInterval: -1}, Policy: &rewrite.Policy{}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o, u := s.opts, s.opts.Upstreams[0]
	if o.MaxClients != config.DefaultMaxClients || o.MaxBulk != config.DefaultMaxBulk || o.AuthTimeout != config.DefaultAuthTimeout ||
		u.DialTimeout != config.DefaultDialTimeout || u.Timeout != config.DefaultUpstreamTimeout {
		t.Errorf("defaults: max clients %d, max bulk %d, auth timeout %v, dial %v, reply timeout %v; want config's",
			o.MaxClients, o.MaxBulk, o.AuthTimeout, u.DialTimeout, u.Timeout)
	}

	for name, c := range map[string]struct {
		u    UpstreamOptions
		want string
	}{
		"ack without a timeout": {UpstreamOptions{Name: "a", Address: nowhere, AckReplicas: 1}, "upstreams.a.ack_timeout: must be positive"},
		"negative ack":          {UpstreamOptions{Name: "a", Address: nowhere, AckReplicas: -1}, "upstreams.a.ack_replicas: -1 is negative"},
		"ack past the reply timeout": {UpstreamOptions{Name: "a", Address: nowhere, AckReplicas: 1, AckTimeout: time.Second, Timeout: time.Second},
			"must be shorter than its reply timeout (1s)"},
	} {
		_, err := New(Options{Upstream: c.u, Policy: &rewrite.Policy{}}, nil, nil)
		if !errors.Is(err, ErrOptions) || !errors.Is(err, config.ErrInvalid) || !strings.Contains(fmtErr(err), c.want) {
			t.Errorf("%s: %v; want ErrOptions and config.ErrInvalid, with %q", name, err, c.want)
		}
	}

	for name, rs := range map[string][]Route{
		"unknown upstream": {{Queues: []string{"*"}, Upstream: "b"}},
		"no default":       {{Queues: []string{"q"}, Upstream: "a"}},
		"bad pattern":      {{Queues: []string{"[", "*"}, Upstream: "a"}},
		"none":             nil,
	} {
		if err := s.CheckRoutes(rs); !errors.Is(err, ErrRoutes) || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: %v; want ErrRoutes and config.ErrInvalid", name, err)
		}
	}
	if err := s.CheckRoutes([]Route{{Queues: []string{"billing*"}, Upstream: "a"}, {Queues: []string{"*"}, Upstream: "a"}}); err != nil {
		t.Errorf("good routes: %v", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
