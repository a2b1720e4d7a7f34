package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emqproxy/emqproxy/bench/jobmix"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Section 8: floods (issue 29). Eight well-behaved clients run the job mix
// at pipeline 1 while one client floods, once through emqproxy and once
// with the same flood directly against the node, in one run, with a window
// without a flood first as each path's baseline. The node is a module
// node of its own with `client-output-buffer-limit normal 256mb 0 0` (the
// proxy's shared connections are normal clients to it, as the flooding
// client is when it connects directly). Each proxied run has a fresh
// `emqproxy serve` (its defaults), so its counters and its peak RSS are the
// run's alone.
//
// Like with like: through the proxy the well-behaved clients are the
// legacy client (EVALSHA, with its pause read before each claim), directly
// they send EMQ.ENQUEUE/CLAIM/COMPLETE with the same pause read (jobmix
// --pause-read): the same round trips per cycle, to the same node.
//
// Every flood is bounded in count and in time: it starts with the window
// and its connections are closed at the window's end (write and read
// deadlines), whatever happened to them.

// floodClients is the number of well-behaved clients.
const floodClients = 8

// The flood's keys on the node (seeded before each run).
const (
	floodBigKey   = "flood:mib"   // 1 MiB
	floodSmallKey = "flood:small" // 8 bytes
)

// flood is one kind of flood; run floods addr until end and returns what
// it did. A nil run is the baseline (no flood).
type flood struct {
	name, what string
	run        func(addr string, end time.Time) floodOutcome
}

// floodOutcome is what a flood did.
type floodOutcome struct {
	sent    int64  // commands written
	replies int64  // replies read (SET) or reply bytes read (the readers)
	unit    string // what replies counts
	ended   string // how its connections ended
}

// floodRun is one window: a flood (or none) on one path.
type floodRun struct {
	proxied    bool
	mix        mixResult
	out        floodOutcome
	metrics    bool               // the proxy's /metrics were read
	delta      map[string]float64 // the proxy's counters over the run, by series
	readyPolls int
	readyFails int
	readyFirst string // the first failed /readyz answer
	nodeClosed int    // the node's output-buffer-limit closures over the run (its log)
	hwm        int64  // the proxy's VmHWM, bytes
}

// floodResult is the section's measurements.
type floodResult struct {
	ran          bool
	warmup, win  time.Duration
	floods       []flood
	runs         map[string]floodRun // by flood and path (floodPath)
	hasIsolation bool                // the proxy exports emqproxy_client_isolated_total
}

func floodPath(proxied bool) string {
	if proxied {
		return "emqproxy"
	}
	return "direct"
}

// The reasons of emqproxy_client_isolated_total (issue 29).
var isolationReasons = []string{"command_bytes", "reply_bytes", "pipeline", "slow_reader"}

// floodList is the section's floods, the baseline first.
func floodList() []flood {
	return []flood{
		{name: "none", what: "no flood: the baseline of each path"},
		{name: "GET 1 MiB never read", what: "pipelined `GET` of a 1 MiB value in chunks of 1,000 commands, never read (at most 1,000,000 commands)", run: floodGetNeverRead},
		{name: "8 × SET 96 MiB", what: "eight connections, each sending `SET` of a 96 MiB value and reading its reply, again until the window ends (at most 16 per connection)", run: floodBigSets},
		{name: "1M small GETs read slowly", what: "1,000,000 `GET` of an 8-byte value in chunks of 1,000, written as fast as the client can; replies read 16 KiB every 10 ms", run: floodSmallPipeline},
		{name: "reads 1 KiB/s", what: "`GET` of the 1 MiB value pipelined 16 at a time (at most 1,000 commands), replies read 1 KiB a second", run: floodSlowReader},
	}
}

// floods measures section 8.
func (r *runner) floods(ctx context.Context, kind proxyKind) error {
	res := floodResult{ran: true, warmup: r.floodWarmup, win: r.floodDur, floods: floodList(), runs: map[string]floodRun{}}
	if kind != kindBinary {
		r.notes = append(r.notes, "section 8 (floods) needs `emqproxy serve`: not measured.")
		return nil
	}
	n, err := node.Start(node.Options{Role: node.Module, Args: []string{"--client-output-buffer-limit", "normal 256mb 0 0"}})
	if err != nil {
		return err
	}
	defer n.Stop()
	r.record(fmt.Sprintf("redis-server --loadmodule emq.so --client-output-buffer-limit \"normal 256mb 0 0\" (stand/node; port %d)", n.Port))
	r.logf("floods: module node %s (pid %d), client-output-buffer-limit normal 256mb 0 0", n.Addr, n.PID())
	for _, f := range res.floods {
		for _, proxied := range []bool{true, false} {
			fr, err := r.floodOnce(ctx, n, f, proxied)
			if err != nil {
				return fmt.Errorf("flood %q %s: %w", f.name, floodPath(proxied), err)
			}
			if hasSeries(fr.delta, "emqproxy_client_isolated_total") {
				res.hasIsolation = true
			}
			res.runs[key2(f.name, floodPath(proxied))] = fr
			r.logf("flood %-26s %-8s %7.0f ops/s p50 %6.0f us p99 %8.0f us errors %d stalled %d; flood wrote %d, %s",
				f.name, floodPath(proxied), fr.mix.OpsPerSec, fr.mix.P50us, fr.mix.P99us, fr.mix.Errors, fr.mix.Stalled, fr.out.sent, fr.out.ended)
		}
	}
	r.flood = res
	return nil
}

// floodOnce runs one window: the well-behaved clients, and the flood over
// the window, on the proxy (a fresh one) or directly.
func (r *runner) floodOnce(ctx context.Context, n *node.Node, f flood, proxied bool) (floodRun, error) {
	fr := floodRun{proxied: proxied}
	if err := r.resetNode(n); err != nil {
		return fr, err
	}
	for _, kv := range [][2]string{{floodBigKey, strings.Repeat("m", 1<<20)}, {floodSmallKey, "smallval"}} {
		if reply, err := node.RawDo(n.Addr, "SET", kv[0], kv[1]); err != nil || !bytes.HasPrefix(reply, []byte("+OK")) {
			return fr, fmt.Errorf("seed %s: %q %v", kv[0], reply, err)
		}
	}
	t := mixTarget{name: "EMQ.* directly", mode: jobmix.Native, addr: n.Addr, server: n, pauseRead: true, keepGoing: true}
	var admin string
	var px *proc
	if proxied {
		name := "emqproxy (flood " + f.name + ")"
		var err error
		px, err = r.startProxy(proxySpec{name: name, kind: kindBinary, audit: filepath.Join(r.tmp, safeName(name)+"-audit.log"), pprof: true, upstream: n.Addr})
		if err != nil {
			return fr, err
		}
		defer px.stop()
		admin = r.admin[px.name]
		t = mixTarget{name: name, mode: jobmix.Legacy, addr: px.addr, pid: px.pid(), server: n, admin: admin, keepGoing: true}
	}
	logPath := filepath.Join(n.Dir, "server.log")
	closed0 := countInFile(logPath, outputLimitLine)
	m0, ok0 := scrapeMetrics(admin)

	type done struct {
		res mixResult
		err error
	}
	ch := make(chan done, 1)
	start := time.Now()
	go func() {
		res, err := r.jobmixOnce(ctx, t, floodClients, 1, r.floodWarmup, r.floodDur)
		ch <- done{res, err}
	}()
	// The flood covers the window: from the warmup's end (the jobmix
	// process's dialing shifts its window a little later) to a little past it.
	floodStart := start.Add(r.floodWarmup)
	end := floodStart.Add(r.floodDur + 300*time.Millisecond)
	var wg sync.WaitGroup
	if admin != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fr.readyPolls, fr.readyFails, fr.readyFirst = pollReady(admin, floodStart, end)
		}()
	}
	select {
	case <-time.After(time.Until(floodStart)):
	case <-ctx.Done():
	}
	if f.run != nil && ctx.Err() == nil {
		fr.out = f.run(t.addr, end)
	} else {
		fr.out.ended = "-"
	}
	d := <-ch
	wg.Wait()
	if d.err != nil {
		return fr, d.err
	}
	fr.mix = d.res
	if px != nil {
		// The flood's connections are closed; let the proxy count what
		// that caused before reading its counters.
		time.Sleep(300 * time.Millisecond)
		m1, ok1 := scrapeMetrics(admin)
		fr.metrics = ok0 && ok1
		fr.delta = map[string]float64{}
		for k, v := range m1 {
			if diff := v - m0[k]; diff != 0 || strings.HasPrefix(k, "emqproxy_client_isolated_total") {
				fr.delta[k] = diff
			}
		}
		fr.hwm = statusBytes(px.pid(), "VmHWM:")
	}
	fr.nodeClosed = countInFile(logPath, outputLimitLine) - closed0
	return fr, nil
}

// outputLimitLine is what the node logs (at warning) when it closes a
// client over its output buffer limit. Redis 7.0's INFO has no counter of
// these (client_output_buffer_limit_disconnections came in 7.2), so the
// section counts the log's lines.
const outputLimitLine = "for overcoming of output buffer limits"

func countInFile(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
}

// pollReady polls /readyz every 100 ms from start to end and returns the
// polls, the failures (no answer within 1 s, or not 200) and the first
// failure's answer.
func pollReady(admin string, start, end time.Time) (polls, fails int, first string) {
	hc := &http.Client{Timeout: time.Second}
	time.Sleep(time.Until(start))
	for time.Now().Before(end) && polls < 1000 {
		polls++
		resp, err := hc.Get("http://" + admin + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
			}
		}
		if err != nil {
			fails++
			if first == "" {
				first = err.Error()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return polls, fails, first
}

// scrapeMetrics reads a proxy's /metrics: every sample by its series
// (name and labels, as written).
func scrapeMetrics(admin string) (map[string]float64, bool) {
	if admin == "" {
		return nil, false
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, false
	}
	return parseMetrics(string(body)), true
}

func parseMetrics(text string) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// metricSum adds up the series of name whose labels include every one of
// labels (each `key="value"`).
func metricSum(m map[string]float64, name string, labels ...string) float64 {
	var sum float64
	for series, v := range m {
		rest, ok := strings.CutPrefix(series, name)
		if !ok || rest != "" && rest[0] != '{' {
			continue
		}
		all := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				all = false
				break
			}
		}
		if all {
			sum += v
		}
	}
	return sum
}

func hasSeries(m map[string]float64, name string) bool {
	for series := range m {
		if rest, ok := strings.CutPrefix(series, name); ok && (rest == "" || rest[0] == '{') {
			return true
		}
	}
	return false
}

// labelValues lists the non-zero series of name as label=value pairs.
func labelValues(m map[string]float64, name, label string) string {
	var parts []string
	for series, v := range m {
		rest, ok := strings.CutPrefix(series, name+"{")
		if !ok || v == 0 {
			continue
		}
		_, after, found := strings.Cut(rest, label+`="`)
		if !found {
			continue
		}
		val, _, _ := strings.Cut(after, `"`)
		parts = append(parts, fmt.Sprintf("%s %.0f", val, v))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// statusBytes returns a /proc/<pid>/status field in kB (VmHWM:, VmRSS:) as bytes.
func statusBytes(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// The floods. Each dials its own connections on loopback, writes within
// its bounds and closes everything by end.

func floodDial(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) }

// endedBy describes how a flood's connection ended.
func endedBy(err error, bound string) string {
	if err == nil {
		return bound
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "held until the window's end"
	}
	if errors.Is(err, io.EOF) {
		return "closed by the peer"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

// chunkOf is n commands of args, encoded once.
func chunkOf(n int, args ...string) []byte {
	var b []byte
	for range n {
		b = resp.AppendCommand(b, args...)
	}
	return b
}

// floodGetNeverRead pipelines GET of the 1 MiB value in chunks of 1,000
// and reads nothing (at most 1,000,000 commands); its connection stays
// open until end.
func floodGetNeverRead(addr string, end time.Time) floodOutcome {
	o := floodOutcome{unit: "-"}
	nc, err := floodDial(addr)
	if err != nil {
		o.ended = "dial: " + err.Error()
		return o
	}
	defer nc.Close()
	chunk := chunkOf(1000, "GET", floodBigKey)
	_ = nc.SetDeadline(end)
	for o.sent < 1_000_000 {
		if _, err = nc.Write(chunk); err != nil {
			break
		}
		o.sent += 1000
	}
	o.ended = endedBy(err, "all written, then held unread until the window's end")
	if err == nil {
		time.Sleep(time.Until(end))
	}
	return o
}

// floodBody is the 96 MiB value of the SET flood, allocated once.
var floodBody = sync.OnceValue(func() []byte { return bytes.Repeat([]byte("s"), 96<<20) })

// floodBigSets runs eight connections, each sending SET of a 96 MiB value
// and reading the reply, again until end (at most 16 per connection; a
// connection that fails is dialed again).
func floodBigSets(addr string, end time.Time) floodOutcome {
	o := floodOutcome{unit: "+OK"}
	body := floodBody()
	var mu sync.Mutex
	var ends []string
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("flood:set:%d", g)
			header := fmt.Appendf(nil, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, len(body))
			var nc net.Conn
			var br *bufio.Reader
			var sent, ok int64
			var last error
			for i := 0; i < 16 && time.Now().Before(end); i++ {
				if nc == nil {
					c, err := floodDial(addr)
					if err != nil {
						last = err
						time.Sleep(50 * time.Millisecond)
						continue
					}
					nc, br = c, bufio.NewReader(c)
					_ = nc.SetDeadline(end)
				}
				bufs := net.Buffers{header, body, []byte("\r\n")}
				_, err := bufs.WriteTo(nc)
				if err == nil {
					sent++
					var line string
					if line, err = br.ReadString('\n'); err == nil {
						if strings.HasPrefix(line, "+OK") {
							ok++
						} else {
							err = fmt.Errorf("reply %q", strings.TrimSpace(line))
						}
					}
				}
				if err != nil {
					last = err
					_ = nc.Close()
					nc = nil
					time.Sleep(50 * time.Millisecond)
				}
			}
			if nc != nil {
				_ = nc.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			o.sent += sent
			o.replies += ok
			if last != nil {
				ends = append(ends, endedBy(last, ""))
			}
		}()
	}
	wg.Wait()
	slices.Sort(ends)
	o.ended = strings.Join(slices.Compact(ends), "; ")
	if o.ended == "" {
		o.ended = "every SET answered"
	}
	return o
}

// floodSmallPipeline writes 1,000,000 GETs of the small value in chunks of
// 1,000 as fast as it can, and reads the replies 16 KiB every 10 ms.
func floodSmallPipeline(addr string, end time.Time) floodOutcome {
	return floodReader(addr, end, chunkOf(1000, "GET", floodSmallKey), 1000, 1_000_000, 16<<10, 10*time.Millisecond)
}

// floodSlowReader pipelines GET of the 1 MiB value 16 at a time (at most
// 1,000) and reads 1 KiB a second.
func floodSlowReader(addr string, end time.Time) floodOutcome {
	return floodReader(addr, end, chunkOf(16, "GET", floodBigKey), 16, 1000, 1<<10, time.Second)
}

// floodReader writes chunk (per commands) until max commands are written,
// and reads at most readSize bytes every readEvery, until end.
func floodReader(addr string, end time.Time, chunk []byte, per, limit int64, readSize int, readEvery time.Duration) floodOutcome {
	o := floodOutcome{unit: "bytes"}
	nc, err := floodDial(addr)
	if err != nil {
		o.ended = "dial: " + err.Error()
		return o
	}
	defer nc.Close()
	_ = nc.SetDeadline(end)
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for o.sent < limit {
			if _, werr = nc.Write(chunk); werr != nil {
				return
			}
			o.sent += per
		}
	}()
	buf := make([]byte, readSize)
	var rerr error
	for time.Now().Before(end) {
		var n int
		n, rerr = nc.Read(buf)
		o.replies += int64(n)
		if rerr != nil {
			break
		}
		time.Sleep(readEvery)
	}
	_ = nc.Close()
	<-written
	switch {
	case rerr != nil && !isTimeout(rerr):
		o.ended = "read: " + endedBy(rerr, "")
	case werr != nil && !isTimeout(werr):
		o.ended = "write: " + endedBy(werr, "")
	case o.sent >= limit:
		o.ended = "all written; read until the window's end"
	default:
		o.ended = "writes held until the window's end"
	}
	return o
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed)
}

// writeFloods writes section 8.
func (r *runner) writeFloods(w func(string, ...any)) {
	res := r.flood
	if !res.ran {
		return
	}
	get := func(f string, proxied bool) floodRun { return res.runs[key2(f, floodPath(proxied))] }
	base := func(proxied bool) floodRun { return get("none", proxied) }
	w("\n## 8. Floods (issue 29): %d well-behaved clients beside one flooding client\n\n", floodClients)
	w("A module node of its own with `client-output-buffer-limit normal 256mb 0 0` (the proxy's shared connections are normal clients to it). %d clients run the job mix at pipeline 1, each on its own queue, for a %v window after %v warmup, while one client floods over the window; once through `emqproxy serve` (its defaults, a fresh process per window, so its counters and peak RSS are that window's) and once with the same flood directly against the node, in one run, one window each. Through the proxy the clients are the legacy client (EVALSHA, with its pause read before each claim); directly they send `EMQ.ENQUEUE/CLAIM/COMPLETE` with the same pause read (`jobmix --pause-read`): the same round trips per cycle. A client that gets an error counts it and starts its next cycle (`jobmix --keep-going`). p50/p99 are of one call (one round trip); \"stalled\" is the clients whose call had been waiting for its reply for %v or more when the window ended, with the longest wait of a call in flight then.\n\n", floodClients, res.win, res.warmup, jobmix.StallAfter)
	w("The floods (each bounded in count, and closed at the window's end):\n\n")
	for _, f := range res.floods {
		w("- **%s**: %s\n", f.name, f.what)
	}
	w("\nThe well-behaved clients (\"× none\" is against the same path without a flood):\n\n")
	w("| flood | path | ops/s | × none | p50 µs | p99 µs | errors | stalled at the end |\n|---|---|---|---|---|---|---|---|\n")
	for _, f := range res.floods {
		for _, proxied := range []bool{true, false} {
			fr := get(f.name, proxied)
			st := fmt.Sprintf("%d (longest wait %.0f ms)", fr.mix.Stalled, fr.mix.StalledUs/1e3)
			w("| %s | %s | %.0f | %s | %.0f | %.0f | %d | %s |\n", f.name, floodPath(proxied), fr.mix.OpsPerSec,
				ratio(fr.mix.OpsPerSec, base(proxied).mix.OpsPerSec), fr.mix.P50us, fr.mix.P99us, fr.mix.Errors, st)
		}
	}
	w("\nThrough the proxy against directly, under the same flood; issue 29's bar (not a test): through the proxy at least 0.5× its own no-flood throughput, a p99 at most twice the direct path's under the same flood, no error and no client stalled at the window's end (the probe, /readyz and the node's closures are in the next table):\n\n")
	w("| flood | ops/s proxy/direct | p50 proxy/direct | p99 proxy/direct | ops/s × none, proxy / direct | p99 × none, proxy / direct | issue 29's bar |\n|---|---|---|---|---|---|---|\n")
	for _, f := range res.floods {
		p, d := get(f.name, true), get(f.name, false)
		bp, bd := base(true), base(false)
		mark := "-"
		if f.run != nil {
			mark = "met"
			if bp.mix.OpsPerSec == 0 || p.mix.OpsPerSec < bp.mix.OpsPerSec/2 || d.mix.P99us == 0 || p.mix.P99us > 2*d.mix.P99us || p.mix.Errors > 0 || p.mix.Stalled > 0 {
				mark = "**missed**"
			}
		}
		w("| %s | %s | %s | %s | %s / %s | %s / %s | %s |\n", f.name, ratio(p.mix.OpsPerSec, d.mix.OpsPerSec), ratio(p.mix.P50us, d.mix.P50us),
			ratio(p.mix.P99us, d.mix.P99us), ratio(p.mix.OpsPerSec, bp.mix.OpsPerSec), ratio(d.mix.OpsPerSec, bd.mix.OpsPerSec),
			ratio(p.mix.P99us, bp.mix.P99us), ratio(d.mix.P99us, bd.mix.P99us), mark)
	}
	w("\nThe proxy and the node over each window: the proxy's counters from its `/metrics` (`emqproxy_upstream_errors_total` kind `probe` and `fence`; `emqproxy_upstream_reconnects_total`, shared connections lost and reconnected; `emqproxy_client_rejected_total` and `emqproxy_client_isolated_total` by reason), `/readyz` polled every 100 ms over the flood (failed / polls), the node's closures of a client over its output buffer limit (lines of its log: Redis 7.0's INFO has no counter of them), the proxy's peak RSS (VmHWM):\n\n")
	iso := "isolated by reason"
	if !res.hasIsolation {
		iso = "isolated (no series)"
	}
	w("| flood | path | probe errors | fence errors | /readyz failed | node closed (output limit) | shared reconnects | clients rejected | %s | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|\n", iso)
	for _, f := range res.floods {
		for _, proxied := range []bool{true, false} {
			fr := get(f.name, proxied)
			if !proxied {
				w("| %s | direct | - | - | - | %d | - | - | - | - |\n", f.name, fr.nodeClosed)
				continue
			}
			if !fr.metrics {
				w("| %s | emqproxy | ? | ? | %d / %d | %d | ? | ? | ? | %.0f MiB |\n", f.name, fr.readyFails, fr.readyPolls, fr.nodeClosed, float64(fr.hwm)/(1<<20))
				continue
			}
			isoText := "-"
			if res.hasIsolation {
				var parts []string
				for _, reason := range isolationReasons {
					parts = append(parts, fmt.Sprintf("%s %.0f", reason, metricSum(fr.delta, "emqproxy_client_isolated_total", `reason="`+reason+`"`)))
				}
				isoText = strings.Join(parts, ", ")
			}
			w("| %s | emqproxy | %.0f | %.0f | %d / %d | %d | %.0f | %s | %s | %.0f MiB |\n", f.name,
				metricSum(fr.delta, "emqproxy_upstream_errors_total", `kind="probe"`), metricSum(fr.delta, "emqproxy_upstream_errors_total", `kind="fence"`),
				fr.readyFails, fr.readyPolls, fr.nodeClosed, metricSum(fr.delta, "emqproxy_upstream_reconnects_total"),
				labelValues(fr.delta, "emqproxy_client_rejected_total", "reason"), isoText, float64(fr.hwm)/(1<<20))
		}
	}
	w("\nWhat each flood did (commands written; replies read: `+OK` of the SETs, bytes for the readers; how its connections ended):\n\n")
	w("| flood | path | commands written | replies read | ended |\n|---|---|---|---|---|\n")
	for _, f := range res.floods {
		if f.run == nil {
			continue
		}
		for _, proxied := range []bool{true, false} {
			fr := get(f.name, proxied)
			read := "-"
			if fr.out.unit != "-" {
				read = fmt.Sprintf("%d %s", fr.out.replies, fr.out.unit)
			}
			w("| %s | %s | %d | %s | %s |\n", f.name, floodPath(proxied), fr.out.sent, read, fr.out.ended)
		}
	}
	if !res.hasIsolation {
		w("\n\"No series\": the proxy exported no `emqproxy_client_isolated_total` series in any window (the metric is absent from this build, or it was never counted and its reasons are not preset).\n")
	}
	var firsts []string
	for _, f := range res.floods {
		for _, proxied := range []bool{true, false} {
			fr := get(f.name, proxied)
			if fr.mix.FirstError != "" {
				firsts = append(firsts, fmt.Sprintf("- %s, %s: a well-behaved client got `%s`", f.name, floodPath(proxied), tail([]byte(fr.mix.FirstError), 300)))
			}
			if fr.readyFirst != "" {
				firsts = append(firsts, fmt.Sprintf("- %s, %s: /readyz answered `%s`", f.name, floodPath(proxied), tail([]byte(fr.readyFirst), 300)))
			}
		}
	}
	if len(firsts) > 0 {
		w("\nThe first error of each window:\n\n%s\n", strings.Join(firsts, "\n"))
	}
}

// writeFloodsOnly writes the report of a run of section 8 alone (--only
// floods): <stem>-floods.md, beside the full runs' files; latest.md is
// left alone.
func (r *runner) writeFloodsOnly(stem string) error {
	return r.writeOnly(stem, "floods", "section 8 alone (`--only floods`)", r.writeFloods)
}
