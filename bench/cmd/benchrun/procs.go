package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// proc is a long-running process the run started (a proxy, twemproxy).
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string // its client address
	log  string // its stdout+stderr file
}

// startProc starts a process that dies with the run (Pdeathsig), with its
// output in a log file under dir, and waits until ready(addr) holds.
func (r *runner) startProc(name, addr string, ready func(addr string) bool, env []string, argv ...string) (*proc, error) {
	logPath := filepath.Join(r.tmp, safeName(name)+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	argv = r.proxyArgv(argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Dir = r.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	lf.Close()
	r.record(strings.TrimSpace(strings.Join(env, " ") + " " + strings.Join(argv, " ")))
	p := &proc{name: name, cmd: cmd, addr: addr, log: logPath}
	r.procs = append(r.procs, p)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ready(addr) {
			return p, nil
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("%s: %s not ready after 20s; log:\n%s", name, addr, tail(out, 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 5s.
func (p *proc) stop() {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// answersPing is ready once addr answers PING.
func answersPing(addr string) bool {
	reply, err := node.RawDo(addr, "PING")
	return err == nil && bytes.HasPrefix(reply, []byte("+PONG"))
}

// proxyReady is ready once a wire-4 client would pass the fence through the
// proxy: GET {emq}:version answers the legacy brand, which the proxy does
// only while its upstream is connected and fenced.
func proxyReady(addr string) bool {
	reply, err := node.RawDo(addr, "GET", node.VersionKey)
	return err == nil && bytes.Contains(reply, []byte(node.DefaultBrand))
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// run runs a bounded command, records its command line and returns stdout
// and the CPU time the command used (from its rusage; the load generator's
// share of the machine, see budget.go).
func (r *runner) run(ctx context.Context, timeout time.Duration, argv ...string) ([]byte, cpu, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = r.root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r.record(strings.Join(argv, " "))
	out, err := cmd.Output()
	var used cpu
	if ps := cmd.ProcessState; ps != nil {
		used = cpu{user: ps.UserTime(), sys: ps.SystemTime()}
	}
	if err != nil {
		return out, used, fmt.Errorf("%s: %w: %s", r.program(argv), err, tail(stderr.Bytes(), 1000))
	}
	return out, used, nil
}

// program names the program argv runs: argv[0], or the program taskset
// starts when argv pins it (pinArgv).
func (r *runner) program(argv []string) string {
	if r.taskset != "" && len(argv) > 3 && argv[0] == r.taskset && argv[1] == "-c" {
		return argv[3]
	}
	return argv[0]
}

// cpu is a process's CPU time so far.
type cpu struct{ user, sys time.Duration }

func (c cpu) sub(o cpu) cpu { return cpu{c.user - o.user, c.sys - o.sys} }

func (c cpu) plus(o cpu) cpu { return cpu{c.user + o.user, c.sys + o.sys} }

// clkTck is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clkTck = 100

func cpuOf(pid int) cpu {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpu{}
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return cpu{}
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return cpu{}
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return cpu{user: time.Duration(u) * time.Second / clkTck, sys: time.Duration(k) * time.Second / clkTck}
}

// rssOf returns VmRSS in bytes.
func rssOf(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// serverStats reads the counters of INFO stats that show pipelining.
type serverStats struct{ cmds, reads int64 }

func statsOf(addr string) serverStats {
	b, err := node.RawDo(addr, "INFO", "stats")
	if err != nil {
		return serverStats{}
	}
	var s serverStats
	for _, line := range strings.Split(string(b), "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "total_commands_processed":
			s.cmds = n
		case "total_reads_processed":
			s.reads = n
		}
	}
	return s
}

// mallocsOf reads go_memstats_mallocs_total (heap allocations so far) from
// a proxy's admin /metrics; ok is false without an admin listener or the
// metric. The scrape itself allocates a few thousand times, next to the
// hundreds of thousands of commands of a run.
func mallocsOf(admin string) (n float64, ok bool) {
	if admin == "" {
		return 0, false
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, found := strings.CutPrefix(line, "go_memstats_mallocs_total "); found {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n, err == nil
		}
	}
	return 0, false
}

// handed are the ports freeAddr returned in this run.
var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

// freeAddr returns a loopback address free now, never one it returned
// before in this run, and below the kernel's ephemeral port range
// (net.ipv4.ip_local_port_range): a port picked there could be taken by
// an outgoing connection of the run (a load generator's, a proxy's to its
// server) before the process it is for binds it, which failed runs with
// "bind: address already in use".
func freeAddr() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	handedMu.Lock()
	defer handedMu.Unlock()
	if low > 11000 {
		for range 1000 {
			port := 10000 + rand.IntN(low-10000)
			if handed[port] {
				continue
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				continue
			}
			ln.Close()
			handed[port] = true
			return ln.Addr().String(), nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}
