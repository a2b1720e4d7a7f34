package deploy_test

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/config"
)

const unitFile = "systemd/emqproxy.service"

// unit is a parsed systemd unit: section -> key -> every value, in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, data []byte) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", unitFile, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// last is the effective value of a single-valued key.
func (u unit) last(section, key string) (string, bool) {
	vs, ok := u[section][key]
	if !ok {
		return "", false
	}
	return vs[len(vs)-1], true
}

func TestSystemdUnitHardening(t *testing.T) {
	u := parseUnit(t, readFile(t, unitFile))
	// The directives the unit must carry, with their exact values.
	want := map[string]string{
		"ExecStart":               "/usr/local/bin/emqproxy serve --config /etc/emqproxy/emqproxy.yaml",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"KillSignal":              "SIGTERM",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"NoNewPrivileges":         "yes",
		"CapabilityBoundingSet":   "",
		"AmbientCapabilities":     "",
		"RestrictSUIDSGID":        "yes",
		"MemoryDenyWriteExecute":  "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"RestrictNamespaces":      "yes",
		"SystemCallArchitectures": "native",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectControlGroups":    "yes",
	}
	required := slices.Sorted(maps.Keys(want))
	for _, k := range required {
		got, ok := u.last("Service", k)
		if !ok {
			t.Errorf("%s: [Service] %s is not set", unitFile, k)
			continue
		}
		if got != want[k] {
			t.Errorf("%s: %s=%q, want %q", unitFile, k, got, want[k])
		}
	}
	if dyn, _ := u.last("Service", "DynamicUser"); dyn != "yes" {
		if user, _ := u.last("Service", "User"); user == "" || user == "root" || user == "0" {
			t.Errorf("%s runs as root: set DynamicUser=yes or a dedicated User=", unitFile)
		}
	}
	if !containsValue(u["Service"]["SystemCallFilter"], "@system-service") {
		t.Errorf("%s: SystemCallFilter does not allow-list @system-service: %q", unitFile, u["Service"]["SystemCallFilter"])
	}
}

func containsValue(vs []string, word string) bool {
	for _, v := range vs {
		for _, f := range strings.Fields(v) {
			if f == word {
				return true
			}
		}
	}
	return false
}

// TestSystemdUnitMatchesProductionConfig checks the unit against the
// configuration it is installed with (examples/production.yaml).
func TestSystemdUnitMatchesProductionConfig(t *testing.T) {
	u := parseUnit(t, readFile(t, unitFile))
	cfg, err := config.Load(productionExample, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop, _ := u.last("Service", "TimeoutStopSec")
	d, err := time.ParseDuration(stop)
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", stop, err)
	}
	if d <= cfg.Timeouts.Drain {
		t.Errorf("TimeoutStopSec %s does not exceed timeouts.drain %s: systemd would kill mid-drain", d, cfg.Timeouts.Drain)
	}
	nofile, _ := u.last("Service", "LimitNOFILE")
	n, err := strconv.Atoi(nofile)
	if err != nil || n < 65536 || n < cfg.Limits.MaxClients+1024 {
		t.Errorf("LimitNOFILE=%q: want at least 65536 and max_clients (%d) plus headroom", nofile, cfg.Limits.MaxClients)
	}
	if !containsValue(u["Service"]["Environment"], "GOMAXPROCS="+strconv.Itoa(cfg.Runtime.GOMAXPROCS)) {
		t.Errorf("Environment GOMAXPROCS does not match runtime.gomaxprocs %d", cfg.Runtime.GOMAXPROCS)
	}
	// ProtectSystem=strict leaves only LogsDirectory writable: a file audit
	// sink must live there.
	logs, _ := u.last("Service", "LogsDirectory")
	if strings.HasPrefix(cfg.Audit.Sink, "/") && !strings.HasPrefix(cfg.Audit.Sink, filepath.Join("/var/log", logs)+"/") {
		t.Errorf("audit.sink %s is outside /var/log/%s, the only directory the unit may write", cfg.Audit.Sink, logs)
	}
	start, _ := u.last("Service", "ExecStart")
	if !strings.Contains(start, "--config "+filepath.Join("/etc/emqproxy", "emqproxy.yaml")) || !strings.HasPrefix(cfg.Map, "/etc/emqproxy/") {
		t.Errorf("ExecStart %q and map %q are not both under /etc/emqproxy", start, cfg.Map)
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify over the unit (with the
// binary path pointed at an existing executable) and fails on any warning:
// an unknown or misspelt directive is ignored by systemd, silently.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed; the unit was checked key by key above")
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no `true` executable to stand in for emqproxy")
	}
	data := bytes.ReplaceAll(readFile(t, unitFile), []byte("/usr/local/bin/emqproxy"), []byte(truePath))
	p := filepath.Join(t.TempDir(), "emqproxy.service")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", p).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if out, err := exec.Command(analyze, "security", "--offline=yes", p).CombinedOutput(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Logf("systemd-analyze security: %s", lines[len(lines)-1])
	}
}
