package main

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machineInfo lists what the results depend on, as name, value pairs.
func (r *runner) machineInfo() [][2]string {
	cmdOut := func(argv ...string) string {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return "unknown (" + err.Error() + ")"
		}
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	git := func(args ...string) string {
		return cmdOut(append([]string{"git", "-C", r.root}, args...)...)
	}
	dirty := ""
	if out, err := exec.Command("git", "-C", r.root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
		dirty = " (working tree has uncommitted changes)"
	}
	return [][2]string{
		{"date", r.started.UTC().Format(time.RFC3339)},
		{"git commit", git("rev-parse", "HEAD") + dirty},
		{"nproc", itoa(runtime.NumCPU())},
		{"CPU", model},
		{"kernel", strings.TrimSpace(string(kernel))},
		{"redis-server", cmdOut("redis-server", "--version")},
		{"redis-benchmark", cmdOut(r.redisBenchmarkBin, "--version")},
		{"nutcracker", cmdOut(r.nutcracker, "--version")},
		{"go", cmdOut("go", "version")},
		{"emqproxy", cmdOut(r.proxyBin, "version")},
		{"load average before / after", r.loadBefore + " / " + loadAvg()},
		{"run time (to the report)", time.Since(r.started).Round(time.Second).String()},
	}
}

// loadAvg returns the 1, 5 and 15 minute load averages: the machine is
// shared, and other load skews every number.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// resultStem names this run's files: date, time and short commit.
func resultStem(root string, t time.Time) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	sha := strings.TrimSpace(string(out))
	if err != nil || sha == "" {
		sha = "nogit"
	}
	return t.UTC().Format("2006-01-02-1504") + "-" + sha
}
