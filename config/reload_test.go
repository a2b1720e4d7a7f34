package config

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestFlagsWinOverVariables(t *testing.T) {
	t.Setenv("EMQPROXY_LISTEN", "127.0.0.1:7000")
	t.Setenv("EMQPROXY_MAP", "env.yaml")
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("listen", "", "")
	fs.String("map", "", "")
	if err := fs.Parse([]string{"--listen", "127.0.0.1:7100"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(writeConfig(t, minimal), fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:7100" || c.Map != "env.yaml" {
		t.Errorf("listen %q (the flag's), map %q (the variable's: its flag is not set)", c.Listen, c.Map)
	}
}

func TestCheckReload(t *testing.T) {
	const running = minimal + `
auth:
  password: old-secret
policy:
  deny: [FLUSHALL]
`
	tests := []struct {
		name    string
		edit    func(string) string
		changed []string // Changed's answer
		refused []string // the keys CheckReload names; none: applied
	}{
		{name: "nothing", edit: func(s string) string { return s }},
		{name: "policy.deny", edit: func(s string) string { return strings.Replace(s, "[FLUSHALL]", "[FLUSHALL, SET]", 1) }, changed: []string{"policy.deny"}},
		{name: "policy.unknown_scripts", edit: func(s string) string { return s + "  unknown_scripts: readonly\n" }, changed: []string{"policy.unknown_scripts"}},
		{name: "auth.password", edit: func(s string) string { return strings.Replace(s, "old-secret", "new-secret", 1) }, changed: []string{"auth.password"}},
		{name: "auth.users", edit: func(s string) string { return strings.Replace(s, "auth:", "auth:\n  users: {bob: pw}", 1) }, changed: []string{"auth.users.bob"}},
		{name: "routes", edit: func(s string) string { return strings.Replace(s, `["*"]`, `["billing", "*"]`, 1) }, changed: []string{"routes"}},
		{name: "map and log.level", edit: func(s string) string { return s + "map: other.yaml\nlog:\n  level: debug\n" }, changed: []string{"map", "log.level"}},
		{name: "listen", edit: func(s string) string { return s + "listen: 127.0.0.1:7000\n" }, changed: []string{"listen"}, refused: []string{"listen"}},
		{name: "an upstream's address", edit: func(s string) string { return strings.Replace(s, "6390", "6391", 1) },
			changed: []string{"upstreams.module-a.address"}, refused: []string{"upstreams.module-a.address"}},
		{name: "an upstream's password", edit: func(s string) string {
			return strings.Replace(s, "role: module", "role: module\n    password: upstream-secret", 1)
		}, changed: []string{"upstreams.module-a.password"}, refused: []string{"upstreams.module-a.password"}},
		{name: "a new upstream", edit: func(s string) string {
			return strings.Replace(s, "routes:", "  module-b:\n    address: 127.0.0.1:6391\n    role: module\nroutes:", 1)
		}, changed: []string{"upstreams.module-b"}, refused: []string{"upstreams.module-b"}},
		{name: "tls files", edit: func(s string) string { return s + "tls:\n  cert: c.pem\n  key: k.pem\n" },
			changed: []string{"tls.cert", "tls.key"}, refused: []string{"tls.cert", "tls.key"}},
		{name: "a limit and a timeout", edit: func(s string) string { return s + "limits:\n  max_clients: 5\ntimeouts:\n  idle: 1m\n" },
			changed: []string{"limits.max_clients", "timeouts.idle"}, refused: []string{"limits.max_clients", "timeouts.idle"}},
		{name: "auth's other keys", edit: func(s string) string { return strings.Replace(s, "auth:", "auth:\n  max_failures: 3", 1) },
			changed: []string{"auth.max_failures"}, refused: []string{"auth.max_failures"}},
		{name: "capture, admin, log.format", edit: func(s string) string {
			return s + "capture:\n  redact: false\nadmin:\n  listen: 0.0.0.0:9121\nlog:\n  format: console\n"
		}, changed: []string{"capture.redact", "log.format", "admin.listen"}, refused: []string{"capture.redact", "log.format", "admin.listen"}},
		{name: "a reloadable key with a fixed one", edit: func(s string) string {
			return strings.Replace(s, "[FLUSHALL]", "[SET]", 1) + "runtime:\n  gomaxprocs: 0\n"
		}, changed: []string{"policy.deny", "runtime.gomaxprocs"}, refused: []string{"runtime.gomaxprocs"}},
	}
	old, err := Load(writeConfig(t, running), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, err := Load(writeConfig(t, tt.edit(running)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := Changed(old, next); !slices.Equal(got, tt.changed) {
				t.Errorf("Changed = %q, want %q", got, tt.changed)
			}
			err = CheckReload(old, next)
			if len(tt.refused) == 0 {
				if err != nil {
					t.Errorf("CheckReload refused: %v", err)
				}
				return
			}
			want := "config: a reload cannot change: " + strings.Join(tt.refused, ", ") + "; restart to apply"
			if !errors.Is(err, ErrRestartRequired) || err.Error() != want {
				t.Errorf("CheckReload = %v, want %q", err, want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the refusal %q shows a value", err)
			}
		})
	}
}

// TestReloadableKeysExist: every key a reload applies is a key of Config.
func TestReloadableKeysExist(t *testing.T) {
	for _, k := range Reloadable() {
		if _, ok := staticKeys[k]; !ok {
			t.Errorf("reloadable %s is not a key", k)
		}
	}
}

// reloadRow is a row of docs/operations.md's reload table: the keys in
// its first cell, what a reload does with them in the second.
var reloadRow = regexp.MustCompile("(?m)^\\| ((?:`[a-z_.<>*\\[\\]-]+`(?:, )?)+) \\| (applied|refused)")

// TestReloadTableInTheDocs: the operators' runbook lists, in one table,
// exactly the keys a reload applies, and says every other key is refused.
func TestReloadTableInTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	refusedRow := false
	for _, m := range reloadRow.FindAllStringSubmatch(string(doc), -1) {
		keys := regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1)
		for _, k := range keys {
			if m[2] == "applied" {
				applied = append(applied, k[1])
			} else {
				refusedRow = true
				if IsReloadable(strings.TrimSuffix(k[1], ".*")) {
					t.Errorf("docs/operations.md says a reload refuses %s, which it applies", k[1])
				}
			}
		}
	}
	slices.Sort(applied)
	want := slices.Sorted(slices.Values(Reloadable()))
	if !slices.Equal(applied, want) {
		t.Errorf("docs/operations.md's reload table applies %q; a reload applies %q", applied, want)
	}
	if !refusedRow {
		t.Error("docs/operations.md's reload table has no row for the keys a reload refuses")
	}
}
