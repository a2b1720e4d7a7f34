package main

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// syscallCounter counts the system calls a process makes (perf stat on the
// raw_syscalls:sys_enter tracepoint) while it runs.
type syscallCounter struct {
	cmds []*exec.Cmd
	outs []*bytes.Buffer
}

// countSyscalls starts one perf per pid. It returns nil when perf is
// missing or not allowed; the caller then reports no syscall counts.
func (r *runner) countSyscalls(pids ...int) *syscallCounter {
	if r.perf == "" {
		return nil
	}
	sc := &syscallCounter{}
	for _, pid := range pids {
		cmd := exec.Command(r.perf, "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", strconv.Itoa(pid))
		var out bytes.Buffer
		cmd.Stderr = &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			sc.stop()
			return nil
		}
		sc.cmds = append(sc.cmds, cmd)
		sc.outs = append(sc.outs, &out)
	}
	r.record(r.perf + " stat -x, -e raw_syscalls:sys_enter -p <pid>   (evidence pass only)")
	// perf needs a moment to attach before the load starts.
	time.Sleep(300 * time.Millisecond)
	return sc
}

// stop ends the counters and returns one count per pid (-1 when unknown).
func (sc *syscallCounter) stop() []int64 {
	if sc == nil {
		return nil
	}
	counts := make([]int64, len(sc.cmds))
	for i, cmd := range sc.cmds {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		counts[i] = -1
		for _, line := range strings.Split(sc.outs[i].String(), "\n") {
			f := strings.Split(line, ",")
			if len(f) > 2 && strings.Contains(line, "raw_syscalls:sys_enter") {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					counts[i] = n
				}
			}
		}
	}
	return counts
}
