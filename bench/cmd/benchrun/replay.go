package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/emqproxy/emqproxy/verify"
)

// replayResult is `verify --replay` of the job mix's capture on two fresh
// nodes: how fast it runs, per side.
type replayResult struct {
	file    string
	calls   int
	elapsed time.Duration
	ok      bool
	err     error
}

func (r replayResult) perSecond() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.calls) / r.elapsed.Seconds()
}

// replayCapture replays the first file of the capture in dir (64 MiB at
// most) on a fresh scripts node and a fresh module node.
func (r *runner) replayCapture(ctx context.Context, dir string) replayResult {
	files, _ := filepath.Glob(filepath.Join(dir, "*.emqcap"))
	slices.Sort(files)
	if len(files) == 0 {
		return replayResult{err: os.ErrNotExist}
	}
	res := replayResult{file: files[0]}
	m, err := shamap.Load(filepath.Join(r.root, "stand", "map.yaml"))
	if err != nil {
		res.err = err
		return res
	}
	sn, err := node.Start(node.Options{Role: node.Scripts})
	if err != nil {
		res.err = err
		return res
	}
	defer sn.Stop()
	mn, err := node.Start(node.Options{Role: node.Module})
	if err != nil {
		res.err = err
		return res
	}
	defer mn.Stop()
	rep, err := verify.Replay(ctx, verify.ReplayConfig{Capture: files[0], Scripts: sn.Addr, Module: mn.Addr,
		Map: m, BodiesDir: filepath.Join(r.root, "stand", "scripts")})
	res.calls, res.elapsed, res.ok, res.err = rep.Calls, rep.Elapsed, rep.OK(), err
	r.logf("replay: %d calls in %v (%.0f calls/s per side), nodes agree: %v, err %v", res.calls, res.elapsed, res.perSecond(), res.ok, err)
	return res
}
