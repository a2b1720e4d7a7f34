package main

import (
	"context"
	"path/filepath"
	"strconv"

	"github.com/emqproxy/emqproxy/bench/jobmix"
	"github.com/emqproxy/emqproxy/stand/node"
)

// captureOnly runs section 6 alone (--only capture): a module node, the
// binary without a capture and the same binary capturing every queue, as
// the full run starts them, the job mix through each at pipelines 1 and 16
// (reps interleaved), then the replay of the capture.
func (r *runner) captureOnly(ctx context.Context, kind proxyKind) error {
	if kind != kindBinary {
		r.notes = append(r.notes, "section 6 (capture) needs `emqproxy serve`: not measured.")
		return nil
	}
	var err error
	if r.module, err = node.Start(node.Options{Role: node.Module}); err != nil {
		return err
	}
	defer r.module.Stop()
	r.logf("capture: module node %s (pid %d)", r.module.Addr, r.module.PID())
	audit := func(name string) string { return filepath.Join(r.tmp, safeName(name)+"-audit.log") }
	px, err := r.startProxy(proxySpec{name: "emqproxy", kind: kind, audit: audit("emqproxy"), pprof: true})
	if err != nil {
		return err
	}
	defer px.stop()
	capDir := filepath.Join(r.tmp, "capture")
	pxCap, err := r.startProxy(proxySpec{name: mixCapture, kind: kind, audit: audit(mixCapture), capture: capDir})
	if err != nil {
		return err
	}
	defer pxCap.stop()
	r.pipelines = []int{1, 16}
	targets := []mixTarget{
		{name: mixProxy, mode: jobmix.Legacy, addr: px.addr, pid: px.pid(), server: r.module, admin: r.admin["emqproxy"]},
		{name: mixCapture, mode: jobmix.Legacy, addr: pxCap.addr, pid: pxCap.pid(), server: r.module},
	}
	for rep := range r.reps {
		for _, p := range r.pipelines {
			for _, t := range targets {
				res, err := r.jobmixOnce(ctx, t, 50, p, r.mixWarmup, r.mixDur)
				if err != nil {
					return err
				}
				r.logf("job mix rep %d P%-2d %-26s %9.0f ops/s", rep+1, p, t.name, res.OpsPerSec)
				k := key2(strconv.Itoa(p), t.name)
				r.mixRes[k] = append(r.mixRes[k], res)
			}
		}
	}
	for _, p := range r.pipelines {
		on, off := r.mixMedian(p, mixCapture), r.mixMedian(p, mixProxy)
		son, soff := r.mixSpend(p, mixCapture), r.mixSpend(p, mixProxy)
		r.logf("capture P%-2d on %.0f off %.0f ops/s: cost %.1f%%; proxy CPU %.2f against %.2f µs/call", p, on, off, 100*(1-on/off),
			son.us(son.path), soff.us(soff.path))
	}
	pxCap.stop() // writes what it has queued
	r.replay = r.replayCapture(ctx, capDir)
	return nil
}

// writeCaptureOnly writes the report of a run of section 6 alone (--only
// capture): <stem>-capture.md, beside the full runs' files.
func (r *runner) writeCaptureOnly(stem string) error {
	return r.writeOnly(stem, "capture", "section 6 alone (`--only capture`)", r.writeCapture)
}
