package main

import (
	"testing"

	"github.com/emqproxy/emqproxy/config"
)

// TestPolicyForDenyAndAllow: an empty policy.deny keeps the default deny
// list (the production example ships `deny: []`), a set one replaces it,
// and policy.allow entries are normalised as deny's are.
func TestPolicyForDenyAndAllow(t *testing.T) {
	var cfg config.Config
	cfg.Policy.Deny = []string{}
	if p := policyFor(&cfg, nil, 0); p.Deny != nil || p.Allow != nil {
		t.Errorf("empty lists: deny %v allow %v, want the default deny list and nothing allowed", p.Deny, p.Allow)
	}
	cfg.Policy.Deny = []string{"keys"}
	cfg.Policy.Allow = []string{"config   get", "lastsave"}
	p := policyFor(&cfg, nil, 0)
	if len(p.Deny) != 1 || !p.Deny["KEYS"] {
		t.Errorf("deny = %v", p.Deny)
	}
	if len(p.Allow) != 2 || !p.Allow["CONFIG GET"] || !p.Allow["LASTSAVE"] {
		t.Errorf("allow = %v", p.Allow)
	}
}
