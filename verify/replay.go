package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// The replay: a capture's calls (package capture) run again on two
// scratch nodes, a scripts node (the calls as the client sent them, as
// EVALSHA, the bodies loaded first) and a module node (each verb call as
// EMQ.<TOKEN> with the same tail; reads and plain commands as sent), each
// queue in its recorded order, queues in parallel. It holds the module to
// the scripts on the application's own traffic, with the harness's
// contract comparison: replies typed, lease deadlines and run-at times
// held to the window of server time around their call (the replay reads
// TIME before and after every call in the same pipeline), lease_epoch as
// declared, and the queue's whole keyspace at the end, masked the same way.
//
// Decisions:
//
//   - Everything is checked before anything is sent: every file and record
//     is read and every script call's sha looked up in the map; a corrupt,
//     foreign or unknown-version file, a sha the map does not pin, or a
//     capture without calls is ErrInput naming the file and the record.
//     A cut last record (a crash) is skipped and reported.
//   - The two nodes run each queue in lockstep, a window of calls at a
//     time (one round trip per side), so the calls of one window run in
//     the same millisecond or so on both sides.
//   - Replies are compared call by call as they come. The keyspace is
//     compared once, at the end. When anything differed, the queue is
//     replayed again from scratch (its keys deleted on both nodes), one
//     call at a time with the keyspace compared after each, up to the
//     first reply that differed: the divergence is named at the call that
//     made it (an ENQUEUE that wrote a wrong row, not the CLAIM that read
//     it), up to locateMax calls into the queue.
//   - Each reply is also compared with the reply production saw (on the
//     module side's reply). A difference there is reported, not a verdict:
//     a capture that starts on a queue that already holds jobs, a REAP or
//     PROMOTE that depends on how much wall-clock time passed, or several
//     clients racing on one queue make production's replies legitimately
//     different from a replay's. Times (EXTEND's deadline, FAIL's run-at)
//     are compared as "a time"; a reply recorded as a shape only (a plain
//     command's, or an error, under redaction) by its shape, an error by
//     its code. A reply recorded from a RESP3 session is compared as the
//     RESP2 reply the replay gets (replyOf). A call production got
//     NOSCRIPT for was not run there and is not replayed.
//   - The verdict (ReplayReport.OK) is the scripts node against the module
//     node, replies and keyspace.

// ReplayConfig is one replay.
type ReplayConfig struct {
	// Capture is a capture file or a directory of them.
	Capture string
	// Scripts and Module are the two scratch nodes, host:port: a plain
	// server (brand absent or the map's legacy brand), and a module node
	// branded echomq:6.0.0; both with nothing else in their keyspace.
	Scripts, Module    string
	Username, Password string
	// Map is the pinned map; BodiesDir holds <name>.lua for each script.
	Map       *shamap.Map
	BodiesDir string
	// Out, when set, receives the printed report.
	Out io.Writer
	// Parallel is how many queues run at once (default 4); Window how many
	// calls go in one round trip (default 64).
	Parallel int
	Window   int
}

// ErrInput means the capture cannot be replayed: a corrupt or foreign
// file, an unknown format version, a sha the map does not pin, no calls.
var ErrInput = errors.New("verify: bad capture")

// locateMax bounds how far into a queue a divergence is located call by
// call, and locateKeys how large the queue may grow meanwhile (each step
// reads the whole queue on both nodes): past either, the divergence is
// reported where the fast pass found it.
const (
	locateMax  = 5000
	locateKeys = 2000
)

// ReplayReport is the outcome of a replay.
type ReplayReport struct {
	Capture      string
	Files        int
	Cuts         []string // files whose last record was cut, and where
	Calls        int      // calls replayed
	NotRun       int      // calls production got NOSCRIPT for (never run there)
	ScriptsNode  string   // e.g. "redis 7.0.15"
	ModuleNode   string
	RunID        string
	Elapsed      time.Duration // of the replay proper (both sides, every queue)
	Queues       []QueueResult
	MapDigest    string
	CapturedWith []string // map digests the capture's headers name, when not Map's
}

// QueueResult is one queue's replay.
type QueueResult struct {
	Queue string
	Calls int
	// First is the first divergence between the two nodes (nil: none).
	First *Divergence
	// Keyspace lists the differences of the queue's keys at the end.
	Keyspace []Diff
	// Production counts the calls whose replay differs from production's
	// reply; ProductionFirst is the first of them.
	Production      int
	ProductionFirst *Divergence
}

// Divergence is one call where two replies (or the state after it) differ.
type Divergence struct {
	Index   int // 1-based, in the queue's order
	Seq     uint64
	Time    time.Time
	Call    string
	Token   string // the verb's token, the read's name, or the command's
	Scripts string // the scripts node's reply
	Module  string // the module node's reply
	Prod    string // production's reply
	Diffs   []Diff
	Located bool // found by the call-by-call pass (the state after this call differed)
}

// OK reports whether the two nodes agreed on every queue.
func (r ReplayReport) OK() bool {
	for _, q := range r.Queues {
		if q.First != nil || len(q.Keyspace) > 0 {
			return false
		}
	}
	return true
}

// replayCall is one call ready to run on both nodes.
type replayCall struct {
	rec    capture.Record
	op     Op
	lines  [2][]string // scripts side, module side
	token  string
	prod   Reply
	prodOK bool // production's reply is comparable (not the proxy's own error)
}

// Replay replays cfg.Capture on the two scratch nodes and compares.
// An error means nothing (ErrInput, ErrConfig, ErrPin, ErrNotScratch,
// ErrNotEmpty: before anything was sent) or not everything (ErrServer)
// was measured; differences are in the report.
func Replay(ctx context.Context, cfg ReplayConfig) (ReplayReport, error) {
	rep := ReplayReport{Capture: cfg.Capture}
	switch {
	case cfg.Capture == "":
		return rep, fmt.Errorf("%w: no capture", ErrConfig)
	case cfg.Scripts == "" || cfg.Module == "":
		return rep, fmt.Errorf("%w: both a scripts node and a module node are needed", ErrConfig)
	case cfg.Scripts == cfg.Module:
		return rep, fmt.Errorf("%w: the scripts node and the module node are the same address %s", ErrConfig, cfg.Scripts)
	case cfg.Map == nil:
		return rep, fmt.Errorf("%w: no pinned map", ErrConfig)
	case cfg.BodiesDir == "":
		return rep, fmt.Errorf("%w: no bodies folder", ErrConfig)
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
	}
	rep.MapDigest = cfg.Map.Digest
	if bad := cfg.Map.VerifyBodies(cfg.BodiesDir); len(bad) > 0 {
		return rep, fmt.Errorf("%w: %s: %v", ErrPin, bad[0].Name, bodyMismatch(bad[0]))
	}
	queues, order, err := loadCapture(cfg, &rep)
	if err != nil {
		return rep, err
	}
	r := &replayer{cfg: cfg}
	defer r.close()
	if err := r.connect(ctx, &rep); err != nil {
		return rep, err
	}
	start := time.Now()
	results := make([]QueueResult, len(order))
	errs := make([]error, len(order))
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	for i, q := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i], errs[i] = r.queue(ctx, q, queues[q])
		}()
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	rep.Queues = results
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	if cfg.Out != nil {
		fmt.Fprint(cfg.Out, rep.String())
	}
	return rep, nil
}

func bodyMismatch(m shamap.Mismatch) string {
	if m.Err != nil {
		return m.Err.Error()
	}
	return fmt.Sprintf("body hashes to %s, pinned %s", m.Actual, m.Pinned)
}

// loadCapture reads every file and turns every record into a call, or
// fails naming the file and record. It returns the calls by queue, each in
// its recorded order, and the queues in order of first appearance.
func loadCapture(cfg ReplayConfig, rep *ReplayReport) (map[string][]*replayCall, []string, error) {
	files, err := capture.Read(cfg.Capture)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	rep.Files = len(files)
	type keyed struct {
		started int64
		c       *replayCall
	}
	byQueue := map[string][]keyed{}
	var order []string
	for _, f := range files {
		if f.Cut != nil {
			rep.Cuts = append(rep.Cuts, fmt.Sprintf("%s: cut at %s, skipped", f.Path, f.Cut))
		}
		if d := f.Header.MapDigest; d != "" && d != cfg.Map.Digest && !slices.Contains(rep.CapturedWith, d) {
			rep.CapturedWith = append(rep.CapturedWith, d)
		}
		for i := range f.Records {
			c, skip, err := newReplayCall(cfg.Map, f.Records[i])
			if err != nil {
				r := f.Records[i]
				return nil, nil, fmt.Errorf("%w: %s: record %d (seq %d, queue %q): %v", ErrInput, f.Path, i+1, r.Seq, r.Queue, err)
			}
			if skip {
				rep.NotRun++
				continue
			}
			q := c.rec.Queue
			if _, ok := byQueue[q]; !ok {
				order = append(order, q)
			}
			byQueue[q] = append(byQueue[q], keyed{f.Header.Started, c})
		}
	}
	if len(order) == 0 {
		return nil, nil, fmt.Errorf("%w: %s: no calls captured (%d files)", ErrInput, cfg.Capture, len(files))
	}
	out := make(map[string][]*replayCall, len(byQueue))
	for q, ks := range byQueue {
		slices.SortStableFunc(ks, func(a, b keyed) int {
			if a.started != b.started {
				return int(a.started - b.started)
			}
			return int(a.c.rec.Seq) - int(b.c.rec.Seq)
		})
		calls := make([]*replayCall, len(ks))
		for i, k := range ks {
			calls[i] = k.c
		}
		out[q] = calls
		rep.Calls += len(calls)
	}
	return out, order, nil
}

// newReplayCall checks one record and builds its lines; skip is true for a
// call production never ran (NOSCRIPT).
func newReplayCall(m *shamap.Map, r capture.Record) (*replayCall, bool, error) {
	if r.Queue == "" {
		return nil, false, errors.New("no queue")
	}
	v, err := resp.Parse(r.Reply)
	if err != nil {
		return nil, false, fmt.Errorf("the recorded reply is not RESP: %v", err)
	}
	c := &replayCall{rec: r, prod: replyOf(v), prodOK: true}
	if v.Type == '-' {
		switch {
		case bytes.HasPrefix(v.Str, []byte("NOSCRIPT")):
			return nil, true, nil
		case bytes.HasPrefix(v.Str, []byte("UPSTREAM")):
			c.prodOK = false // the proxy's own error: whether it ran is unknown
		}
	}
	args := make([]string, len(r.Args))
	for i, a := range r.Args {
		args[i] = string(a)
	}
	name := strings.ToUpper(args[0])
	switch sc := rewrite.ParseScriptCall(r.Args); {
	case sc.Kind.Eval():
		if len(args) < 3 {
			return nil, false, fmt.Errorf("%s with %d arguments", name, len(args)-1)
		}
		sha := strings.ToLower(args[1])
		if sc.Kind.Body() {
			sha = shamap.SHA(r.Args[1])
		}
		s, ok := m.Lookup([]byte(sha))
		if !ok {
			return nil, false, fmt.Errorf("sha %s is not in the map", sha)
		}
		if r.Token != "" && r.Token != s.Verb {
			return nil, false, fmt.Errorf("sha %s was %s when captured; the map pins it as %s", sha, r.Token, cmpOr(s.Verb, "read "+s.Name))
		}
		nk, ok := sc.NumKeys()
		if !ok {
			return nil, false, fmt.Errorf("numkeys %q", args[2])
		}
		c.op = Op{Token: cmpOr(s.Verb, s.Name), Keys: args[3 : 3+nk], Vals: args[3+nk:]}
		c.token = c.op.Token
		c.lines[scriptSide] = args
		if s.Verb != "" {
			c.lines[nativeSide] = append([]string{s.Command}, args[2:]...)
		} else {
			c.lines[nativeSide] = args
		}
	default:
		c.op = Op{Raw: args}
		c.token = name
		c.lines[scriptSide], c.lines[nativeSide] = args, args
	}
	return c, false, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// replyOf converts a parsed reply to a typed Reply, a RESP3 one to what
// the same command answers a RESP2 client (the replay's protocol): a null
// is a nil, a boolean an integer, a double, big number or verbatim string
// a bulk (the verbatim's format prefix dropped), a blob error an error, a
// map its keys and values in one array, a set or push an array; an
// attribute is dropped for the reply it annotates.
func replyOf(v resp.Value) Reply {
	switch {
	case v.Nil:
		return Reply{Kind: KindNil}
	case v.Type == '+':
		return Reply{Kind: KindStatus, Str: string(v.Str)}
	case v.Type == '-' || v.Type == '!':
		return Reply{Kind: KindError, Str: string(v.Str)}
	case v.Type == ':':
		return Reply{Kind: KindInt, Int: v.Int}
	case v.Type == '#':
		if string(v.Str) == "t" {
			return Reply{Kind: KindInt, Int: 1}
		}
		return Reply{Kind: KindInt}
	case v.Type == '$' || v.Type == ',' || v.Type == '(':
		return Reply{Kind: KindBulk, Str: string(v.Str)}
	case v.Type == '=':
		_, text, _ := strings.Cut(string(v.Str), ":")
		return Reply{Kind: KindBulk, Str: text}
	case v.Type == '|' && len(v.Elems) > 0:
		return replyOf(v.Elems[len(v.Elems)-1])
	}
	out := Reply{Kind: KindArray, Elems: make([]Reply, len(v.Elems))}
	for i, e := range v.Elems {
		out.Elems[i] = replyOf(e)
	}
	return out
}

// replayer holds the two nodes' clients.
type replayer struct {
	cfg   ReplayConfig
	c     [2]valkey.Client
	runID string
}

func (r *replayer) close() {
	for _, c := range r.c {
		if c != nil {
			c.Close()
		}
	}
}

// connect dials both nodes, checks they are empty scratch nodes of their
// kind and loads the script bodies (every body on the scripts node, the
// reads on the module node).
func (r *replayer) connect(ctx context.Context, rep *ReplayReport) error {
	for s, addr := range []string{r.cfg.Scripts, r.cfg.Module} {
		c, err := dial(Config{Addr: addr, Username: r.cfg.Username, Password: r.cfg.Password})
		if err != nil {
			return err
		}
		r.c[s] = c
	}
	h := &harness{ex: &executor{c: r.c[nativeSide]}}
	if _, err := h.preflight(ctx, Config{Addr: r.cfg.Module}); err != nil {
		return fmt.Errorf("module node %s: %w", r.cfg.Module, err)
	}
	r.runID, rep.RunID, rep.ModuleNode = h.runID, h.runID, h.version
	sc := r.c[scriptSide]
	info, err := readServerInfo(ctx, sc)
	if err != nil {
		return fmt.Errorf("scripts node %s: %w", r.cfg.Scripts, err)
	}
	rep.ScriptsNode = info.Version
	ex := &executor{c: sc}
	b, err := (&harness{ex: ex}).brand(ctx)
	if err != nil {
		return fmt.Errorf("scripts node %s: %w", r.cfg.Scripts, err)
	}
	if b != "" && b != r.cfg.Map.LegacyBrand {
		return fmt.Errorf("%w: scripts node %s: %s holds %s, want the legacy brand %q or nothing", ErrNotScratch, r.cfg.Scripts, versionKey, brandText(b), r.cfg.Map.LegacyBrand)
	}
	keys, err := scanKeys(ctx, sc, "")
	if err != nil {
		return err
	}
	if other := firstOther(keys); other != "" {
		return fmt.Errorf("%w: scripts node %s: %d keys besides %s (first %q); use a scratch node", ErrNotEmpty, r.cfg.Scripts, len(keys), versionKey, other)
	}
	for _, s := range r.cfg.Map.Scripts {
		body, err := os.ReadFile(filepath.Join(r.cfg.BodiesDir, s.Name+".lua"))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		sides := []side{scriptSide}
		if s.Read {
			sides = append(sides, nativeSide)
		}
		for _, sd := range sides {
			sha, err := r.c[sd].Do(ctx, r.c[sd].B().ScriptLoad().Script(string(body)).Build()).ToString()
			if err != nil || sha != s.SHA {
				return fmt.Errorf("%w: SCRIPT LOAD %s on the %s node: %q %v", ErrServer, s.Name, sd, sha, err)
			}
		}
	}
	return nil
}

// run sends calls to side s in one round trip, TIME before each call and
// after the last, and returns their timed steps.
func (r *replayer) run(ctx context.Context, s side, calls []*replayCall) ([]stepResult, error) {
	c := r.c[s]
	cmds := make(valkey.Commands, 0, 2*len(calls)+1)
	cmds = append(cmds, c.B().Time().Build())
	// TIME, call 1, TIME, [its row], call 2, TIME, [its row], ...
	timeAt, callAt, rowAt := []int{0}, make([]int, len(calls)), make([]int, len(calls))
	for i, rc := range calls {
		l := rc.lines[s]
		callAt[i] = len(cmds)
		cmds = append(cmds, c.B().Arbitrary(l[0]).Args(l[1:]...).Build(), c.B().Time().Build())
		timeAt = append(timeAt, len(cmds)-1)
		rowAt[i] = len(cmds)
		switch k := rc.rowKey(); {
		case k == "":
			rowAt[i] = -1
		case strings.HasSuffix(k, ":paused"):
			cmds = append(cmds, c.B().Get().Key(k).Build())
		default:
			cmds = append(cmds, c.B().Hgetall().Key(k).Build())
		}
	}
	res := c.DoMulti(ctx, cmds...)
	times := make([]int64, len(calls)+1)
	for i, at := range timeAt {
		ss, err := res[at].AsStrSlice()
		if err != nil || len(ss) != 2 {
			return nil, fmt.Errorf("%w: TIME on the %s node: %v", ErrServer, s, err)
		}
		if times[i], err = timeMs(ss[0], ss[1]); err != nil {
			return nil, err
		}
	}
	out := make([]stepResult, len(calls))
	for i, rc := range calls {
		rep, err := fromResult(res[callAt[i]])
		if err != nil {
			return nil, fmt.Errorf("%s node: %w", s, err)
		}
		out[i] = stepResult{Op: rc.op, Reply: rep, Win: window{times[i], times[i+1]}, Timed: rc.op.Raw == nil}
		if rowAt[i] >= 0 {
			row, err := fromResult(res[rowAt[i]])
			if err != nil {
				return nil, fmt.Errorf("%s node: %w", s, err)
			}
			out[i].Row = &row
		}
	}
	return out, nil
}

// rowKey is the job row (or pause flag) a script call names in its keys,
// read right after the call so a row written wrong is caught at its call
// even when a later call overwrites it ("" when the call names none).
func (rc *replayCall) rowKey() string {
	if rc.op.Raw != nil {
		return ""
	}
	for _, k := range rc.op.Keys {
		if strings.HasPrefix(k, "emq:{") && (strings.Contains(k, "}:job:") || strings.HasSuffix(k, "}:paused")) {
			return k
		}
	}
	return ""
}

// runBoth runs calls on both nodes at once.
func (r *replayer) runBoth(ctx context.Context, calls []*replayCall) ([2][]stepResult, error) {
	var out [2][]stepResult
	var errs [2]error
	var wg sync.WaitGroup
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[s], errs[s] = r.run(ctx, side(s), calls)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs[:]...)
}

// queue replays one queue and judges it.
func (r *replayer) queue(ctx context.Context, q string, calls []*replayCall) (QueueResult, error) {
	res := QueueResult{Queue: q, Calls: len(calls)}
	var steps [2][]stepResult
	for lo := 0; lo < len(calls); lo += r.cfg.Window {
		chunk := calls[lo:min(lo+r.cfg.Window, len(calls))]
		got, err := r.runBoth(ctx, chunk)
		if err != nil {
			return res, fmt.Errorf("queue %s: %w", q, err)
		}
		for j, rc := range chunk {
			i := lo + j
			sa, sb := got[scriptSide][j], got[nativeSide][j]
			if diffs := callDiffs(rc, sa, sb); len(diffs) > 0 && res.First == nil {
				res.First = divergence(i, rc, sa, sb, diffs)
			}
			if !productionAgrees(rc, sb) {
				res.Production++
				if res.ProductionFirst == nil {
					res.ProductionFirst = divergence(i, rc, sa, sb, []Diff{{Where: "reply against production's", Want: rc.prodText(), Got: sb.Reply.String()}})
				}
			}
		}
		steps[scriptSide] = append(steps[scriptSide], got[scriptSide]...)
		steps[nativeSide] = append(steps[nativeSide], got[nativeSide]...)
	}
	diffs, err := r.compareQueue(ctx, q, steps, 0)
	if err != nil {
		return res, err
	}
	res.Keyspace = diffs
	if res.First == nil && len(diffs) == 0 {
		return res, nil
	}
	limit := len(calls)
	if res.First != nil {
		limit = res.First.Index
	}
	if limit > locateMax {
		return res, nil
	}
	d, err := r.locate(ctx, q, calls[:limit])
	if err != nil {
		return res, err
	}
	if d != nil {
		res.First = d
	}
	return res, nil
}

// errTooLarge stops locate on a queue grown past locateKeys.
var errTooLarge = errors.New("verify: queue too large to locate call by call")

// compareQueue compares the queue's keys on both nodes, masked by the
// steps that ran (errTooLarge past maxKeys keys, when maxKeys > 0).
func (r *replayer) compareQueue(ctx context.Context, q string, steps [2][]stepResult, maxKeys int) ([]Diff, error) {
	var snaps [2]Snapshot
	for s := range 2 {
		snap, err := snapshotQueue(ctx, r.c[s], q)
		if err != nil {
			return nil, fmt.Errorf("%s node: %w", side(s), err)
		}
		if maxKeys > 0 && len(snap) > maxKeys {
			return nil, errTooLarge
		}
		snaps[s] = snap
	}
	ma, da := maskSide(scriptSide, snaps[scriptSide], steps[scriptSide], r.runID)
	mb, db := maskSide(nativeSide, snaps[nativeSide], steps[nativeSide], r.runID)
	return append(append(da, db...), compareSnapshots(ma, mb)...), nil
}

// callDiffs compares one call's replies on the two nodes, and the row it
// names as it was right after the call.
func callDiffs(rc *replayCall, sa, sb stepResult) []Diff {
	diffs := compareReplies("reply", 0, []stepResult{sa}, []stepResult{sb})
	if sa.Row != nil && sb.Row != nil {
		if a, b := rowValue(*sa.Row), rowValue(*sb.Row); a != b {
			diffs = append(diffs, Diff{Where: "key " + rc.rowKey() + " right after the call", Want: a, Got: b})
		}
	}
	return diffs
}

// rowValue renders a row (HGETALL, fields sorted, lease_epoch left out) or
// a flag (GET) for comparison.
func rowValue(r Reply) string {
	if r.Kind != KindArray {
		return r.String()
	}
	var parts []string
	for i := 0; i+1 < len(r.Elems); i += 2 {
		if f := r.Elems[i].Str; f != "lease_epoch" {
			parts = append(parts, f+"="+strconv.Quote(r.Elems[i+1].Str))
		}
	}
	slices.Sort(parts)
	return "hash{" + strings.Join(parts, " ") + "}"
}

// locate replays calls again from an empty queue, one at a time, and
// returns the first call after which the replies or the queue's keys
// differ (nil: none did this time).
func (r *replayer) locate(ctx context.Context, q string, calls []*replayCall) (*Divergence, error) {
	for s := range 2 {
		if err := r.dropQueue(ctx, side(s), q); err != nil {
			return nil, err
		}
	}
	var steps [2][]stepResult
	for i, rc := range calls {
		got, err := r.runBoth(ctx, []*replayCall{rc})
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q, err)
		}
		steps[scriptSide] = append(steps[scriptSide], got[scriptSide]...)
		steps[nativeSide] = append(steps[nativeSide], got[nativeSide]...)
		sa, sb := got[scriptSide][0], got[nativeSide][0]
		diffs := callDiffs(rc, sa, sb)
		state, err := r.compareQueue(ctx, q, steps, locateKeys)
		if errors.Is(err, errTooLarge) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		for k := range state {
			state[k].Where = "after the call, " + state[k].Where
		}
		if diffs = append(diffs, state...); len(diffs) > 0 {
			d := divergence(i, rc, sa, sb, diffs)
			d.Located = true
			return d, nil
		}
	}
	return nil, nil
}

// dropQueue deletes every key of queue q on side s (keys the replay wrote).
func (r *replayer) dropQueue(ctx context.Context, s side, q string) error {
	c := r.c[s]
	keys, err := scanKeys(ctx, c, "*{"+rewrite.GlobEscape(q)+"}*")
	if err != nil {
		return err
	}
	for lo := 0; lo < len(keys); lo += 512 {
		if err := c.Do(ctx, c.B().Del().Key(keys[lo:min(lo+512, len(keys))]...).Build()).Error(); err != nil {
			return fmt.Errorf("%w: DEL on the %s node: %v", ErrServer, s, err)
		}
	}
	return nil
}

func divergence(i int, rc *replayCall, sa, sb stepResult, diffs []Diff) *Divergence {
	return &Divergence{
		Index: i + 1, Seq: rc.rec.Seq, Time: rc.rec.Time, Call: rc.callText(), Token: rc.token,
		Scripts: sa.Reply.String(), Module: sb.Reply.String(), Prod: rc.prodText(), Diffs: diffs,
	}
}

// callText renders the call as the client sent it, long arguments cut.
func (rc *replayCall) callText() string {
	parts := make([]string, len(rc.lines[scriptSide]))
	for i, a := range rc.lines[scriptSide] {
		if len(a) > 48 {
			a = a[:40] + "...(" + strconv.Itoa(len(a)) + " bytes)"
		}
		parts[i] = strconv.Quote(a)
		if isPlainWord(a) {
			parts[i] = a
		}
	}
	return strings.Join(parts, " ")
}

func isPlainWord(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c > '~' || c == '"' {
			return false
		}
	}
	return true
}

func (rc *replayCall) prodText() string {
	if !rc.prodOK {
		return rc.prod.String() + " (the proxy's own error: not compared)"
	}
	return rc.prod.String()
}

// productionAgrees compares the module node's reply with production's.
func productionAgrees(rc *replayCall, sb stepResult) bool {
	if !rc.prodOK {
		return true
	}
	got, want := sb.Reply, rc.prod
	if rc.rec.ShapeOnly() {
		return sameShape(want, got)
	}
	if sb.Op.timedReply() && got.Kind == KindInt && want.Kind == KindInt && got.Int > 0 && want.Int > 0 {
		return true // both a time: production's clock is not the replay's
	}
	return got.Equal(want)
}

// sameShape compares types, lengths, integers, statuses and error codes
// (an error's text is a stand-in), not bulk content.
func sameShape(a, b Reply) bool {
	if a.Kind != b.Kind || len(a.Elems) != len(b.Elems) {
		return false
	}
	switch a.Kind {
	case KindBulk:
		return len(a.Str) == len(b.Str)
	case KindError:
		ca, _, _ := strings.Cut(a.Str, " ")
		cb, _, _ := strings.Cut(b.Str, " ")
		return ca == cb
	case KindInt, KindStatus, KindNil:
		return a.Equal(b)
	}
	for i := range a.Elems {
		if !sameShape(a.Elems[i], b.Elems[i]) {
			return false
		}
	}
	return true
}

// String prints the replay: one line per queue, then each queue's first
// divergence with both replies, production's and the keys that differ.
func (r ReplayReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay of %s: %d files, %d calls in %d queues", r.Capture, r.Files, r.Calls, len(r.Queues))
	if r.NotRun > 0 {
		fmt.Fprintf(&b, " (%d not run: production got NOSCRIPT)", r.NotRun)
	}
	b.WriteString("\n")
	for _, c := range r.Cuts {
		fmt.Fprintf(&b, "%s\n", c)
	}
	if len(r.CapturedWith) > 0 {
		fmt.Fprintf(&b, "note: captured with map %s, replayed with map %s\n", strings.Join(r.CapturedWith, ", "), r.MapDigest)
	}
	fmt.Fprintf(&b, "scripts node %s, module node %s (run_id %s)\n", r.ScriptsNode, r.ModuleNode, r.RunID)
	if r.Elapsed > 0 {
		fmt.Fprintf(&b, "replayed in %v: %.0f calls/s per side\n", r.Elapsed.Round(time.Millisecond), float64(r.Calls)/r.Elapsed.Seconds())
	}
	for _, q := range r.Queues {
		verdict := "equal"
		if q.First != nil || len(q.Keyspace) > 0 {
			verdict = "DIFFERING"
		}
		prod := "equal to production"
		if q.Production > 0 {
			prod = fmt.Sprintf("%d replies differ from production's", q.Production)
		}
		fmt.Fprintf(&b, "queue %s: %d calls, %s; %s\n", q.Queue, q.Calls, verdict, prod)
	}
	for _, q := range r.Queues {
		if q.First != nil {
			fmt.Fprintf(&b, "first divergence in queue %s (scripts | module):\n", q.Queue)
			q.First.print(&b)
		} else if len(q.Keyspace) > 0 {
			fmt.Fprintf(&b, "queue %s: every reply equal, but the keys differ at the end (scripts | module):\n", q.Queue)
			for i, d := range q.Keyspace {
				if i == maxDiffs {
					fmt.Fprintf(&b, "  ... %d more\n", len(q.Keyspace)-maxDiffs)
					break
				}
				fmt.Fprintf(&b, "  %s\n", cut(d.String()))
			}
		}
		if q.ProductionFirst != nil {
			fmt.Fprintf(&b, "first reply of queue %s that differs from production's (production | module):\n", q.Queue)
			q.ProductionFirst.print(&b)
		}
	}
	return b.String()
}

func (d *Divergence) print(b *strings.Builder) {
	fmt.Fprintf(b, "  call %d (%s, seq %d, %s): %s\n", d.Index, d.Token, d.Seq, d.Time.UTC().Format(time.RFC3339Nano), d.Call)
	fmt.Fprintf(b, "  scripts: %s\n  module: %s\n  production: %s\n", d.Scripts, d.Module, d.Prod)
	for i, x := range d.Diffs {
		if i == maxDiffs {
			fmt.Fprintf(b, "  ... %d more\n", len(d.Diffs)-maxDiffs)
			break
		}
		fmt.Fprintf(b, "  %s\n", cut(x.String()))
	}
}

// maxDiffs and maxDiffText bound what the report prints of one divergence.
const (
	maxDiffs    = 12
	maxDiffText = 600
)

func cut(s string) string {
	if len(s) <= maxDiffText {
		return s
	}
	return s[:maxDiffText] + fmt.Sprintf("... (%d bytes)", len(s))
}
