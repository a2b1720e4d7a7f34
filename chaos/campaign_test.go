package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// binary is the emqproxy binary the fleet runs, built once.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "emqchaos-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "emqproxy")
	cmd := exec.Command("go", "build", "-o", binary, "./cmd/emqproxy")
	cmd.Dir = node.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// FixedSeed is the short campaign's fixed seed.
const FixedSeed = 31

// ShortFaults are the kinds of the short campaign: every kind but the
// stale primary, whose healing (the sentinels turning it into a replica,
// on their 10 s INFO period) alone takes longer than the campaign.
var ShortFaults = slices.DeleteFunc(slices.Clone(AllFaults), func(k string) bool { return k == FaultPrimaryStop })

func startFleet(t *testing.T) *Fleet {
	t.Helper()
	began := time.Now()
	dir := t.TempDir()
	if d := os.Getenv("EMQCHAOS_DIR"); d != "" {
		// Kept after the test: the histories, reports and logs.
		dir = filepath.Join(d, fmt.Sprintf("%s-%d", t.Name(), time.Now().Unix()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// EMQCHAOS_NO_ACK=1 runs the sidecars without WAIT after writes
	// (ack_replicas 0): the deliberately broken fleet the checker must
	// catch losing acknowledged jobs across a failover.
	f, err := StartFleet(FleetOptions{Dir: dir, Bin: binary, NoAck: os.Getenv("EMQCHAOS_NO_ACK") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	t.Logf("fleet started in %v: %d sidecars, module sets %s and %s, scripts node %s",
		time.Since(began).Round(time.Millisecond), len(f.Sidecars), f.Sets[0].Master, f.Sets[1].Master, f.Scripts.Addr)
	return f
}

func rerun(seed uint64, d time.Duration, kinds []string) string {
	k := ""
	if slices.Equal(kinds, ShortFaults) {
		k = " KINDS=short"
	} else if !slices.Equal(kinds, AllFaults) {
		k = " KINDS=" + strings.Join(kinds, ",")
	}
	return fmt.Sprintf("make chaos SEED=%d DURATION=%s%s", seed, makeDuration(d), k)
}

// makeDuration spells d as make chaos takes it: minutes or seconds.
func makeDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", (d+time.Second-1)/time.Second)
}

// campaign runs one campaign and fails the test on a violation, printing
// the report (the seed and the command that reruns it first).
func campaign(t *testing.T, f *Fleet, seed uint64, d time.Duration, kinds []string, suffix string) *Outcome {
	t.Helper()
	t.Logf("campaign seed %d for %v; rerun with: %s", seed, d, rerun(seed, d, kinds))
	out, err := Run(f, Config{Seed: seed, Duration: d, Kinds: kinds, Suffix: suffix, Rerun: rerun(seed, d, kinds), Logf: t.Logf})
	if err != nil {
		t.Fatalf("seed %d: the campaign could not be judged: %v (rerun: %s)", seed, err, rerun(seed, d, kinds))
	}
	if !out.Result.OK() {
		t.Errorf("seed %d: properties violated; rerun: %s\n%s", seed, rerun(seed, d, kinds), out.Report)
	} else {
		t.Logf("%s", out.Report)
	}
	return out
}

// TestCampaignShort runs two short campaigns on one fleet: the fixed
// seed, then a fresh one (logged, with the command that replays it).
func TestCampaignShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault campaign runs real nodes and sidecars")
	}
	d := 15 * time.Second
	if v := os.Getenv("EMQCHAOS_SHORT"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	f := startFleet(t)
	campaign(t, f, FixedSeed, d, ShortFaults, "1")
	fresh := uint64(time.Now().UnixNano())
	campaign(t, f, fresh, d, ShortFaults, "2")
}

// TestCampaignLong is the long campaign of `make chaos`: EMQCHAOS_DURATION
// (required, or the test is skipped), EMQCHAOS_SEED (a fresh one when
// unset), EMQCHAOS_KINDS ("all", "short" or a comma-separated list of
// kinds), EMQCHAOS_REPORT (the report's path).
func TestCampaignLong(t *testing.T) {
	ds := os.Getenv("EMQCHAOS_DURATION")
	if ds == "" {
		t.Skip("EMQCHAOS_DURATION is not set (make chaos DURATION=30m)")
	}
	d, err := time.ParseDuration(ds)
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EMQCHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	f := startFleet(t)
	kinds := AllFaults
	switch k := os.Getenv("EMQCHAOS_KINDS"); k {
	case "", "all":
	case "short":
		kinds = ShortFaults
	default:
		kinds = strings.Split(k, ",")
		for _, x := range kinds {
			if !slices.Contains(AllFaults, x) {
				t.Fatalf("EMQCHAOS_KINDS: unknown fault %q (kinds: %s)", x, strings.Join(AllFaults, ","))
			}
		}
	}
	out := campaign(t, f, seed, d, kinds, "1")
	if path := os.Getenv("EMQCHAOS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(out.Report), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("report written to %s", path)
	}
}

// TestRecheck runs the checker again on a kept campaign's history and
// final state: EMQCHAOS_RECHECK=<dir>/history-<seed>.jsonl (its
// final-<seed>.json beside it); EMQCHAOS_PROP=<words> keeps only the
// violations of the properties whose name holds them.
func TestRecheck(t *testing.T) {
	path := os.Getenv("EMQCHAOS_RECHECK")
	if path == "" {
		t.Skip("EMQCHAOS_RECHECK is not set")
	}
	events, err := readHistoryFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(strings.Replace(strings.Replace(path, "history-", "final-", 1), ".jsonl", ".json", 1))
	if err != nil {
		t.Fatal(err)
	}
	var final Final
	if err := json.Unmarshal(b, &final); err != nil {
		t.Fatal(err)
	}
	r := Check(events, final)
	if p := os.Getenv("EMQCHAOS_PROP"); p != "" {
		// Only the violations of the properties whose name holds p.
		r.Violations = slices.DeleteFunc(r.Violations, func(v Violation) bool { return !strings.Contains(v.Property, p) })
	}
	var sb strings.Builder
	WriteReport(&sb, Summary{History: path}, r)
	if !r.OK() {
		t.Errorf("%s", sb.String())
	} else {
		t.Logf("%s", sb.String())
	}
}
