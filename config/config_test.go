package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "emqproxy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const minimal = `
upstreams:
  module-a:
    address: "127.0.0.1:6390"
    role: module
routes:
  - queues: ["*"]
    upstream: module-a
`

func TestLoadDefaults(t *testing.T) {
	c, err := Load(writeConfig(t, minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:6380" || c.Map != "stand/map.yaml" || c.Admin.Listen != "127.0.0.1:9121" {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.Timeouts.Upstream != 5*time.Second || c.Limits.MaxPipeline != 1024 {
		t.Errorf("typed defaults not applied: %+v %+v", c.Timeouts, c.Limits)
	}
	u := c.Upstreams["module-a"]
	if u.Name != "module-a" || u.Role != RoleModule || u.Address != "127.0.0.1:6390" {
		t.Errorf("upstream = %+v", u)
	}
	if len(c.Routes) != 1 || c.Routes[0].Upstream != "module-a" || len(c.Routes[0].Queues) != 1 || c.Routes[0].Queues[0] != "*" {
		t.Errorf("routes = %+v", c.Routes)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	t.Setenv("EMQPROXY_LISTEN", "127.0.0.1:7000")
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS", "127.0.0.1:7001")
	t.Setenv("EMQPROXY_TIMEOUTS_UPSTREAM", "250ms")
	// password is not in the file: the override must still reach it.
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_PASSWORD", "s3cret")
	t.Setenv("EMQPROXY_UPSTREAMS_MODULE_A_DB", "2")
	c, err := Load(writeConfig(t, minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7000" {
		t.Errorf("listen = %q", c.Listen)
	}
	if got := c.Upstreams["module-a"].Address; got != "127.0.0.1:7001" {
		t.Errorf("upstream address = %q", got)
	}
	if u := c.Upstreams["module-a"]; u.Password != "s3cret" || u.DB != 2 {
		t.Errorf("upstream overrides of keys absent from the file: password %q db %d", u.Password, u.DB)
	}
	if c.Timeouts.Upstream != 250*time.Millisecond {
		t.Errorf("timeouts.upstream = %v", c.Timeouts.Upstream)
	}
}

func TestFlagsOverride(t *testing.T) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("listen", "", "")
	if err := fs.Parse([]string{"--listen", "127.0.0.1:7100"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(writeConfig(t, minimal), fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7100" {
		t.Errorf("listen = %q", c.Listen)
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantKey string
	}{
		{name: "bad role", body: strings.Replace(minimal, "role: module", "role: modul", 1), wantKey: "upstreams.module-a.role"},
		{name: "bad address", body: strings.Replace(minimal, `"127.0.0.1:6390"`, `"nowhere"`, 1), wantKey: "upstreams.module-a.address"},
		{name: "unknown route upstream", body: strings.Replace(minimal, "upstream: module-a", "upstream: module-b", 1), wantKey: "routes[0].upstream"},
		{name: "no default route", body: strings.Replace(minimal, `["*"]`, `["quotes"]`, 1), wantKey: "routes"},
		{name: "bad policy", body: minimal + "policy:\n  unknown_scripts: allow\n", wantKey: "policy.unknown_scripts"},
		{name: "bad limit", body: minimal + "limits:\n  max_pipeline: 0\n", wantKey: "limits.max_pipeline"},
		{name: "bad duration", body: minimal + "timeouts:\n  write: -1s\n", wantKey: "timeouts.write"},
		{name: "bad log level", body: minimal + "log:\n  level: loud\n", wantKey: "log.level"},
		{name: "bad pattern", body: strings.Replace(minimal, `["*"]`, `["[", "*"]`, 1), wantKey: "routes[0].queues[0]"},
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
			if !strings.Contains(err.Error(), tt.wantKey+":") {
				t.Errorf("error %q does not name key %q", err, tt.wantKey)
			}
		})
	}
}

func TestLocalExampleIsValid(t *testing.T) {
	if _, err := Load("../deploy/examples/local.yaml", nil); err != nil {
		t.Fatal(err)
	}
}

func TestCaptureSection(t *testing.T) {
	c, err := Load(writeConfig(t, minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Capture.Queues) != 0 || c.Capture.MaxBytes != 1<<30 || !c.Capture.Redact {
		t.Errorf("capture defaults: %+v", c.Capture)
	}
	t.Setenv("EMQPROXY_CAPTURE_QUEUES", "orders,mail*")
	t.Setenv("EMQPROXY_CAPTURE_DIR", "/tmp/cap")
	t.Setenv("EMQPROXY_CAPTURE_REDACT", "false")
	c, err = Load(writeConfig(t, minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Capture.Queues, " ") != "orders mail*" || c.Capture.Dir != "/tmp/cap" || c.Capture.Redact {
		t.Errorf("capture overrides: %+v", c.Capture)
	}
	t.Setenv("EMQPROXY_CAPTURE_QUEUES", "")
	t.Setenv("EMQPROXY_CAPTURE_DIR", "")
	t.Setenv("EMQPROXY_CAPTURE_MAX_BYTES", "0")
	_, err = Load(writeConfig(t, minimal+"capture:\n  queues: [\"[\"]\n"), nil)
	for _, key := range []string{"capture.queues[0]", "capture.dir", "capture.max_bytes"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("bad capture section: %v; want %s named", err, key)
		}
	}
}

// TestPolicyAllow: policy.allow comes from the file or from its variable
// (a comma-separated list), and an empty entry is an error naming it.
func TestPolicyAllow(t *testing.T) {
	c, err := Load(writeConfig(t, minimal+"policy:\n  allow: [LASTSAVE, \"config get\"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Policy.Allow, ",") != "LASTSAVE,config get" {
		t.Errorf("policy.allow from the file = %q", c.Policy.Allow)
	}
	if c, err := Load(writeConfig(t, minimal), nil); err != nil || len(c.Policy.Allow) != 0 {
		t.Errorf("policy.allow by default = %q, %v", c.Policy.Allow, err)
	}
	t.Setenv("EMQPROXY_POLICY_ALLOW", "DEBUG,ACL USERS")
	c, err = Load(writeConfig(t, minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Policy.Allow, ",") != "DEBUG,ACL USERS" {
		t.Errorf("policy.allow from EMQPROXY_POLICY_ALLOW = %q", c.Policy.Allow)
	}
	t.Setenv("EMQPROXY_POLICY_ALLOW", "")
	_, err = Load(writeConfig(t, minimal+"policy:\n  allow: [\"\"]\n"), nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "policy.allow[0]:") {
		t.Errorf("an empty entry: %v", err)
	}
}
