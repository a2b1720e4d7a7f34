package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCheckRoutesAndAck: the rules package proxy applies to the Options it
// is given are the configuration's, and name the key of each problem.
func TestCheckRoutesAndAck(t *testing.T) {
	ups := []string{"module-a", "scripts-b"}
	if err := CheckRoutes([]Route{{Queues: []string{"billing*"}, Upstream: "scripts-b"}, {Queues: []string{"*"}, Upstream: "module-a"}}, ups); err != nil {
		t.Errorf("good routes: %v", err)
	}
	for name, c := range map[string]struct {
		rs   []Route
		want string
	}{
		"none":             {nil, "routes: no route"},
		"unknown upstream": {[]Route{{Queues: []string{"*"}, Upstream: "c"}}, `routes[0].upstream: "c" is not one of the upstreams (module-a, scripts-b)`},
		"no pattern":       {[]Route{{Upstream: "module-a"}, {Queues: []string{"*"}, Upstream: "module-a"}}, "routes[0].queues: is empty"},
		"bad pattern":      {[]Route{{Queues: []string{"[", "*"}, Upstream: "module-a"}}, `routes[0].queues[0]: "[" is not a valid pattern`},
		"no default":       {[]Route{{Queues: []string{"q"}, Upstream: "module-a"}}, "routes: the last route must match every queue"},
	} {
		err := CheckRoutes(c.rs, ups)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}

	if err := CheckAck("up", 1, time.Second, "timeouts.upstream", 5*time.Second); err != nil {
		t.Errorf("good ack: %v", err)
	}
	if err := CheckAck("up", 0, 0, "timeouts.upstream", 5*time.Second); err != nil {
		t.Errorf("no ack: %v", err)
	}
	for name, c := range map[string]struct {
		replicas int
		timeout  time.Duration
		want     string
	}{
		"negative replicas": {-1, 0, "up.ack_replicas: -1 is negative"},
		"negative timeout":  {0, -time.Second, "up.ack_timeout: -1s is negative"},
		"no timeout":        {2, 0, "up.ack_timeout: must be positive when ack_replicas is 2"},
		"past the reply":    {1, 5 * time.Second, "up.ack_timeout: 5s must be shorter than timeouts.upstream (5s)"},
	} {
		err := CheckAck("up", c.replicas, c.timeout, "timeouts.upstream", 5*time.Second)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}
