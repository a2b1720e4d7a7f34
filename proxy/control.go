package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// The control loop: routes of moved queues read from the nodes.
//
// With Options.Control set, the proxy keeps a lease on every upstream node
// and reads that node's control table (package control/table) with each
// renewal, every ControlOptions.Poll. The tables of all nodes are merged
// (per queue, the highest epoch wins) into a plan.ControlState: the queues
// that are held, and the owner of every moved queue, which overrides the
// routes of the file (plan.Router.WithOwners). A new state is applied in
// this order:
//
//  1. the router with the new owners is stored (s.routes), then the state
//     (install): from then on every command is admitted under it, and a
//     command admitted under an older state whose queue the new one
//     changed is refused at its send (session's hold.go, leaseLapsed);
//  2. the acknowledger (ackLoop, a goroutine of its own) waits until no
//     command admitted under an older state is in flight for a queue the
//     new state changed: held, released or given another owner
//     (plan.ControlState.QueueInFlight: the plan counts a command, per
//     slot of its queues, when it admits it, and the session uncounts it
//     once its replies are read, before it writes them to its client);
//  3. only then the node's epoch is acknowledged on the node.
//
// So when a proxy acknowledges the epoch at which a queue became held,
// none of its commands for that queue is in flight, and no later one is sent
// until the queue is released. A session checks the state before it loads
// the router, and the router is stored before the state that needs it, so a
// command admitted under a state is routed by that state's owners or later.
//
// No client can stop the loop. Installing a table never waits; the leases
// are renewed by the renewal loops while the acknowledger waits. The
// acknowledger waits only for commands of the changed queues (a client
// blocked in BLPOP with no timeout on another queue, a WAIT, a client that
// does not read its replies: none delays it), and those end within a bound:
// a command blocked on a dedicated connection for a queue that moved is
// given up after ControlOptions.Hold (session's segment.go, waitDedicated:
// its client gets an error and the connection is closed, so the server drops
// the blocked command), a shared connection's reply is bounded by the
// upstream's timeout. Until the commands are done the epoch is not
// acknowledged, whatever the wait: the proxy keeps its lease, so the mover
// waits for it and, past its own wait, stops with the queue held (--resume
// waits again, --abort releases it). A proxy never acknowledges a hold
// while one of its commands may still reach the queue's old owner, and
// never lets its lease lapse to end a wait (that would make every mover
// treat it as gone, and hold every other queue of the node).
//
// A lease is valid from when its renewal was sent, for ControlOptions.Lease
// less one poll: always before the node's key expires. Each node's lease is
// renewed by a loop of its own and made valid as soon as its own renewal
// is back: a node that does not answer (frozen, partitioned) delays only
// its own renewals, up to half the lease each, never another node's (a
// single loop that validated every lease after the slowest renewal of a
// round let a healthy node's lease lapse for a poll in every round while
// another node hung, holding its queues). A command for a
// queue routed to a node whose lease is not valid is held (the plan asks
// the controller, Leased; hold.go) until a
// renewal succeeds; a renewal applies the node's table before the lease
// counts again, so a proxy paused past its lease sees every move made
// meanwhile before it writes again. Without Options.Control, none of this
// runs and the data path pays one nil check per command.
//
// No lease counts until the table of every upstream has been read once.
// The entry that decides a queue's owner may be on one node alone (a hold,
// a release or an abort is written on the source only; a flip whose write
// on the source was lost is on the target only), and a proxy started while
// that node is unreachable would route the queue by the other tables, to a
// node whose lease is valid. So until then every queue's commands are held
// (they wait, then get `-TRYAGAIN queue <q> has no lease on upstream <u>`;
// keyless commands pass), the lease gauges stay 0 and the log names the
// upstreams not read yet. A node that becomes unreachable later keeps its
// last table in the merge; only its own queues are held, by its lease.

// Defaults of ControlOptions' zero durations.
const (
	DefaultControlPoll  = config.DefaultControlPoll
	DefaultControlLease = config.DefaultControlLease
	DefaultHold         = config.DefaultHold
)

// ControlOptions turns on the control table. Zero durations take the
// defaults: Poll DefaultControlPoll (250ms), Lease DefaultControlLease
// (2s), Hold DefaultHold (5s).
type ControlOptions struct {
	// Poll is how often every lease is renewed and every table read.
	Poll time.Duration
	// Lease is the expiry of the proxy's lease key on each node.
	Lease time.Duration
	// Hold is the longest a command waits for its queue; then it gets
	// -TRYAGAIN and nothing is sent.
	Hold time.Duration
	// ID names the proxy in the nodes' registries (default
	// <host>-<pid>-<random>).
	ID string
}

// controller runs the control loop of one server.
type controller struct {
	srv    *Server
	opts   ControlOptions
	log    *zap.Logger
	nodes  []*ctlNode
	byUp   map[*upstream.Upstream]*ctlNode
	byName map[string]*ctlNode
	state  atomic.Pointer[plan.ControlState]
	start  time.Time // the monotonic origin of ctlNode.valid
	host   string

	mu   sync.Mutex   // orders router stores: apply and SwapRoutes
	base *plan.Router // the routes of the file, without owners
	// olds are the superseded states some of whose commands were still in
	// flight when last looked at (guarded by mu): the acknowledger waits
	// for them (drained).
	olds []*plan.ControlState

	// want is the newest installed state with the epochs of the node
	// tables merged into it, for the acknowledger; wake tells it so.
	want atomic.Pointer[ackWant]
	wake chan struct{}

	// umu serializes the renewals' updates (update), and guards what
	// they keep: allRead, warnedUnread, skipped, and ctlNode's table,
	// have and renewed.
	umu sync.Mutex
	// allRead: every node's table was read once (ctlNode.have); until
	// then no lease counts.
	allRead      bool
	warnedUnread bool // the wait for the unread tables was logged

	heldNow  prometheus.Gauge
	holdSecs prometheus.Observer
	epoch    prometheus.Gauge
	leaseOK  *prometheus.GaugeVec
	skipN    prometheus.Gauge
	skipped  map[skipKey]string // the entries skipped at the last update, reported once (report)
	fwd      forwardTables      // tables only move forward (control_forward.go; under umu)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ctlNode is the control loop's view of one upstream node.
type ctlNode struct {
	up      *upstream.Upstream
	cn      *table.Node  // nil until dialed
	valid   atomic.Int64 // the lease is valid until start+valid (ns); 0: no lease
	table   table.Table  // the table its last successful renewal read (under umu)
	have    bool         // table was read at least once (under umu)
	renewed time.Time    // when the last successful renewal was sent (under umu)
	applied atomic.Int64 // the node epoch acknowledged (written by ackLoop, read by renewals)
	// seen is the epoch of the node's table in the state in force (set
	// once it is installed). caught is when (since start) a new data
	// connection last read a newer epoch than seen: only a renewal sent
	// after it makes the lease valid (caughtUp).
	seen   atomic.Int64
	caught atomic.Int64
}

// ackWant is what the acknowledger acknowledges once st's changed queues
// have nothing in flight: epochs[i], the epoch of node i's table merged in
// st (-1: not read yet).
type ackWant struct {
	st     *plan.ControlState
	epochs []int64
}

// newController prepares the control loop; start runs it.
func newController(s *Server, o ControlOptions) (*controller, error) {
	if o.Poll <= 0 {
		o.Poll = DefaultControlPoll
	}
	if o.Lease <= 0 {
		o.Lease = DefaultControlLease
	}
	if o.Hold <= 0 {
		o.Hold = DefaultHold
	}
	if o.Lease < 2*o.Poll {
		return nil, fmt.Errorf("%w: control lease %v must be at least twice the poll %v", ErrOptions, o.Lease, o.Poll)
	}
	host, _ := os.Hostname()
	if o.ID == "" {
		o.ID = defaultControlID()
	}
	c := &controller{srv: s, opts: o, log: s.log.Named("control").With(zap.String("proxy", o.ID)),
		byUp: map[*upstream.Upstream]*ctlNode{}, byName: map[string]*ctlNode{}, start: time.Now(), host: host,
		base: s.routes.Load(), wake: make(chan struct{}, 1)}
	for _, u := range s.ups {
		n := &ctlNode{up: u}
		c.nodes = append(c.nodes, n)
		c.byUp[u] = n
		c.byName[u.Name()] = n
	}
	c.state.Store(plan.NewControlState(0, map[string]bool{}, map[string]*upstream.Upstream{}))
	c.heldNow = prometheus.NewGauge(prometheus.GaugeOpts{Name: "emqproxy_control_held_commands",
		Help: "Commands waiting now for a queue that is moving or a node whose lease lapsed."})
	hold := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "emqproxy_control_hold_seconds",
		Help: "How long held commands waited (released or refused).", Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2, 5, 10}})
	c.holdSecs = hold
	c.epoch = prometheus.NewGauge(prometheus.GaugeOpts{Name: "emqproxy_control_epoch",
		Help: "The epoch of the control table the proxy applied (the highest of its nodes)."})
	c.leaseOK = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "emqproxy_control_lease",
		Help: "1 while the proxy holds a lease on the upstream."}, []string{"upstream"})
	c.skipN = prometheus.NewGauge(prometheus.GaugeOpts{Name: "emqproxy_control_skipped_entries",
		Help: "Control-table entries the proxy skipped at its last read (malformed, newer than their table, or naming an upstream it does not have)."})
	if reg := s.opts.Registry; reg != nil {
		for _, col := range []prometheus.Collector{c.heldNow, hold, c.epoch, c.leaseOK, c.skipN} {
			if err := reg.Register(col); err != nil {
				return nil, fmt.Errorf("%w: metrics: %w", ErrOptions, err)
			}
		}
	}
	if err := c.initForward(s.opts.Registry); err != nil {
		return nil, err
	}
	return c, nil
}

// defaultControlID is ControlOptions.ID's default:
// <host>-<pid>-<random>.
func defaultControlID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// run starts the loop.
func (c *controller) run() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1 + len(c.nodes))
	go func() {
		defer c.wg.Done()
		c.ackLoop(ctx)
	}()
	// One renewal loop per node: a node that does not answer delays its
	// own renewals only, never another node's lease.
	for i := range c.nodes {
		go func() {
			defer c.wg.Done()
			t := time.NewTicker(c.opts.Poll)
			defer t.Stop()
			for {
				c.renewal(ctx, i)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	c.log.Info("control table on", zap.Duration("poll", c.opts.Poll), zap.Duration("lease", c.opts.Lease), zap.Duration("hold", c.opts.Hold))
}

// stop ends the loop and gives up the leases.
func (c *controller) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, n := range c.nodes {
		if n.cn != nil {
			_ = n.cn.Deregister(ctx, c.opts.ID)
			n.cn.Close()
		}
	}
}

// renewal renews the lease on node i, reading its table, and applies the
// result (update). Each node has a loop of its own (run): a renewal waits
// for its own node only, up to half the lease (renew).
func (c *controller) renewal(ctx context.Context, i int) {
	n := c.nodes[i]
	sent := time.Now()
	t, err := c.renew(ctx, n)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("control lease renewal failed", zap.String("upstream", n.up.Name()), zap.Error(err))
		}
		c.update(i, false, sent, table.Table{})
		return
	}
	c.update(i, true, sent, t)
}

// update applies a renewal of node i (ok: it succeeded, sent then, and read
// t): the merged table of every node's last table read is applied when it
// changed, then the acknowledger is told the epochs to acknowledge, and
// node i's lease is validated (every node's, the first time every table
// has been read: allRead). A node whose renewal failed keeps its last
// table in the merge. Updates run one at a time (umu).
func (c *controller) update(i int, ok bool, sent time.Time, t table.Table) {
	c.umu.Lock()
	defer c.umu.Unlock()
	if n := c.nodes[i]; ok {
		c.adopt(n, t) // never an older table than n's (control_forward.go)
		n.renewed = sent
	}
	var tables []table.Table
	var unread []string
	skipped := map[skipKey]string{}
	for _, n := range c.nodes {
		if n.have {
			tables = append(tables, n.table)
			for q, why := range n.table.Skipped {
				skipped[skipKey{n.up.Name(), q}] = why
			}
		} else {
			unread = append(unread, n.up.Name())
		}
	}
	st := c.apply(table.Merge(tables...), skipped)
	c.report(skipped)
	wasAllRead := c.allRead
	c.checkAllRead(unread)
	w := &ackWant{st: st, epochs: make([]int64, len(c.nodes))}
	for j, n := range c.nodes {
		if n.have {
			n.seen.Store(n.table.Epoch) // installed above (apply)
		}
		if j == i && ok || j != i && !wasAllRead {
			c.validate(n)
		} else if c.leaseLeft(n, time.Now()) <= 0 {
			c.leaseOK.WithLabelValues(n.up.Name()).Set(0)
		}
		w.epochs[j] = -1
		if n.have && n.cn != nil {
			w.epochs[j] = n.table.Epoch
		}
	}
	c.want.Store(w)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// validate makes n's lease valid from its last renewal that succeeded,
// whose table is installed: for the lease less one poll from when it was
// sent, once every table was read (allRead) and unless a new connection
// read a newer epoch after it was sent (caughtUp). Under umu.
func (c *controller) validate(n *ctlNode) {
	sent := int64(n.renewed.Sub(c.start))
	if !n.have || !c.allRead || sent <= n.caught.Load() {
		if c.leaseLeft(n, time.Now()) <= 0 {
			c.leaseOK.WithLabelValues(n.up.Name()).Set(0)
		}
		return
	}
	n.valid.Store(int64(n.renewed.Add(c.opts.Lease - c.opts.Poll).Sub(c.start)))
	if n.caught.Load() >= sent {
		n.valid.Store(1) // a connection read a newer epoch meanwhile (caughtUp)
	}
	c.leaseOK.WithLabelValues(n.up.Name()).Set(1)
}

// ackLoop is the acknowledger: at every update's state (want), once no
// command admitted under an older state can still reach the old owner of a
// queue that state changed (drained), it acknowledges every node's epoch
// that changed. It runs apart from the renewals, so a wait here never delays
// a renewal. The wait has no bound of its own: the commands it waits for
// end within one (see the control loop's comment); past ControlOptions.Hold
// it logs the queue it waits for, once per state.
func (c *controller) ackLoop(ctx context.Context) {
	var warned *plan.ControlState
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		began := time.Now()
		pause := 100 * time.Microsecond
		for {
			w := c.want.Load()
			if w == nil || !c.ackPending(w) {
				break
			}
			if q, ok := c.drained(w.st); !ok {
				if warned != w.st && time.Since(began) > c.opts.Hold {
					warned = w.st
					c.log.Warn("control epoch not acknowledged yet: a command for a queue the table changed is still in flight; the queue's move waits for it",
						zap.Int64("epoch", w.st.Epoch), zap.String("queue", q), zap.Duration("waited", time.Since(began)))
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
				pause = min(2*pause, c.opts.Poll/10)
				continue
			}
			c.ack(ctx, w)
		}
	}
}

// ackPending reports whether some node's epoch in w is not acknowledged.
func (c *controller) ackPending(w *ackWant) bool {
	for i, n := range c.nodes {
		if w.epochs[i] >= 0 && w.epochs[i] != n.applied.Load() {
			return true
		}
	}
	return false
}

// ack acknowledges every node's epoch in w that is not yet.
func (c *controller) ack(ctx context.Context, w *ackWant) {
	for i, n := range c.nodes {
		if w.epochs[i] < 0 || w.epochs[i] == n.applied.Load() {
			continue
		}
		n.applied.Store(w.epochs[i])
		// A failed write is repaired by the next renewal, which carries
		// the epoch applied.
		if err := n.cn.Ack(ctx, c.registration(n)); err != nil && ctx.Err() == nil {
			c.log.Warn("control acknowledgement failed", zap.String("upstream", n.up.Name()), zap.Error(err))
		}
	}
}

// drained reports whether no command admitted under a state older than st
// is in flight for a queue st changed (held, released or given another
// owner since that state; plan.ControlState.ChangedTo); when not, q is
// one such queue. Superseded states with nothing in flight are dropped
// from olds: a state once empty stays so (the plan counts a command under
// a superseded state only to uncount it at once).
func (c *controller) drained(st *plan.ControlState) (q string, ok bool) {
	c.mu.Lock()
	olds := c.olds[:0]
	for _, o := range c.olds {
		if o != st && o.InFlight() != 0 {
			olds = append(olds, o)
		}
	}
	clear(c.olds[len(olds):])
	c.olds = olds
	olds = slices.Clone(olds)
	c.mu.Unlock()
	for _, o := range olds {
		for _, q := range o.ChangedTo(st) {
			if o.QueueInFlight(q) != 0 {
				return q, false
			}
		}
	}
	return "", true
}

// caughtUp is run on every new data connection to the upstream named
// name, after the fence and before the connection carries anything: it
// reads the node's control epoch on that connection. When the state in
// force holds an older table of the node (seen), the proxy missed a change
// of it (a move held a queue while the proxy's loop was stopped, or its
// lease looked valid by a clock the node's did not follow), so the lease
// on the node is lapsed now, and only a renewal sent after this read
// (caught, in validate; the node runs it after the GET) makes it valid
// again, with the table it read installed first. A command
// for the node's queues is then held until that renewal, and one admitted
// before is refused at its send (session's hold.go): nothing is sent on a
// connection opened after a mover held its queue (and closed the
// connections of the proxies it waited out, package control's
// latewriters.go) before the proxy applied the hold, whatever its clock
// says. The connection itself is never refused: keyless commands and other
// nodes' queues are not concerned.
func (c *controller) caughtUp(ctx context.Context, name string, conn fence.Conn) error {
	n := c.byName[name]
	if n == nil {
		return nil
	}
	r, err := conn.Do(ctx, "GET", table.KeyEpoch)
	if err != nil {
		return fmt.Errorf("reading %s: %w", table.KeyEpoch, err)
	}
	var ep int64
	switch {
	case r.IsError():
		return fmt.Errorf("reading %s: %s", table.KeyEpoch, r.Str)
	case !r.Null && r.Type == '$':
		if ep, err = strconv.ParseInt(r.Str, 10, 64); err != nil {
			return fmt.Errorf("%s is %q, not an integer", table.KeyEpoch, r.Str)
		}
	}
	if n.seen.Load() < ep {
		n.caught.Store(int64(time.Since(c.start)))
		n.valid.Store(1) // lapsed (validate: renewed only by a renewal sent after caught)
		c.log.Warn("a new connection read a control epoch the proxy has not applied: the node's queues are held until it is",
			zap.String("upstream", name), zap.Int64("epoch", ep), zap.Int64("applied", n.seen.Load()))
	}
	return nil
}

// checkAllRead sets allRead once no table is unread, after the merged table
// of them all was applied (update): from then on the leases count. Until
// then, the first update logs which upstreams' tables are missing.
func (c *controller) checkAllRead(unread []string) {
	switch {
	case c.allRead:
	case len(unread) == 0:
		c.allRead = true
		c.log.Info("control tables of every upstream read: queues are served")
	case !c.warnedUnread:
		c.warnedUnread = true
		c.log.Warn("control tables not read yet: every queue's commands are held until they are (a queue's owner may be decided by a table of these alone)",
			zap.Strings("upstreams", unread))
	}
}

// renew renews the lease on n and reads its table, dialing first if needed.
func (c *controller) renew(ctx context.Context, n *ctlNode) (table.Table, error) {
	if n.cn == nil {
		o := n.up.Options()
		cn, err := table.Dial(table.NodeOptions{Name: o.Name, Address: o.Address, Sentinel: o.Sentinel,
			Username: o.Username, Password: o.Password, DB: o.DB, TLS: o.TLSConfig, Timeout: c.opts.Lease / 2,
			ReplyTimeout: c.opts.Lease / 2})
		if err != nil {
			return table.Table{}, err
		}
		n.cn = cn
	}
	rctx, cancel := context.WithTimeout(ctx, c.opts.Lease/2)
	defer cancel()
	return n.cn.Renew(rctx, c.registration(n), c.opts.Lease)
}

// registration is the proxy's line on n.
func (c *controller) registration(n *ctlNode) table.Registration {
	return table.Registration{ID: c.opts.ID, Applied: n.applied.Load(), Renewed: time.Now().UnixMilli(),
		LeaseMs: c.opts.Lease.Milliseconds(), Host: c.host, PID: os.Getpid()}
}

// leaseLeft is how long n's lease is still valid at now (<= 0: lapsed).
func (c *controller) leaseLeft(n *ctlNode, now time.Time) time.Duration {
	v := n.valid.Load()
	if v == 0 {
		return 0
	}
	return time.Duration(v) - now.Sub(c.start)
}

// skipKey names a skipped entry: the upstream whose table holds it ("" for
// the merged table) and its queue.
type skipKey struct{ up, queue string }

// report logs the entries skipped that were not skipped, or not for the
// same reason, at the last update, and sets the gauge: a bad entry is
// reported once, not at every poll.
func (c *controller) report(skipped map[skipKey]string) {
	for k, why := range skipped {
		if c.skipped[k] != why {
			c.log.Error("control table entry skipped; every other queue follows the rest of the table",
				zap.String("upstream", k.up), zap.String("queue", k.queue), zap.String("why", why))
		}
	}
	c.skipped = skipped
	c.skipN.Set(float64(len(skipped)))
}

// apply installs the merged table t when it differs from the state in
// force, and returns the state in force. It never waits for the commands
// in flight: the acknowledger does (ackLoop). An owner this proxy does not
// have is added to skipped (the file's route stays for that queue).
func (c *controller) apply(t table.Table, skipped map[skipKey]string) *plan.ControlState {
	cur := c.state.Load()
	st := plan.NewControlState(t.Epoch, map[string]bool{}, map[string]*upstream.Upstream{})
	for q, e := range t.Queues {
		if e.State == table.Held {
			st.Held[q] = true
			continue
		}
		u := c.srv.byName[e.Owner]
		if u == nil {
			skipped[skipKey{"", q}] = "owner " + strconv.Quote(e.Owner) + " is not an upstream of this proxy; the file's route stays"
			continue
		}
		st.Owner[q] = u
	}
	if st.Epoch == cur.Epoch && maps.Equal(st.Held, cur.Held) && maps.Equal(st.Owner, cur.Owner) {
		return cur
	}
	c.mu.Lock()
	c.srv.routes.Store(c.base.WithOwners(st.Owner))
	c.state.Store(st)
	c.olds = append(c.olds, cur) // after the store: its count only falls from here (plan's admit)
	c.mu.Unlock()
	cur.Supersede()
	c.epoch.Set(float64(st.Epoch))
	c.log.Info("control table applied", zap.Int64("epoch", st.Epoch), zap.Int("held", len(st.Held)), zap.Int("moved", len(st.Owner)))
	return st
}

// setRoutes replaces the file's routes (a reload), keeping the owners.
func (c *controller) setRoutes(r *plan.Router) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = r
	c.srv.routes.Store(r.WithOwners(c.state.Load().Owner))
}

// Leased reports whether the proxy's lease on u is valid at now (the plan
// asks it before it admits a command for a queue routed to u).
func (c *controller) Leased(u *upstream.Upstream, now time.Time) bool {
	return c.leaseLeft(c.byUp[u], now) > 0
}

// Current is the control state in force.
func (c *controller) Current() *plan.ControlState { return c.state.Load() }

// LeaseLapsed reports whether the proxy holds a lease on u's node and it
// lapsed by now (session.Control).
func (c *controller) LeaseLapsed(u *upstream.Upstream, now time.Time) bool {
	n := c.byUp[u]
	return n != nil && c.leaseLeft(n, now) <= 0
}

// HoldLimits returns ControlOptions.Hold and Poll (session.Control).
func (c *controller) HoldLimits() (hold, poll time.Duration) { return c.opts.Hold, c.opts.Poll }

// Holding counts a command waiting for its held queue until done is called
// (session.Control).
func (c *controller) Holding() (done func()) {
	began := time.Now()
	c.heldNow.Inc()
	return func() {
		c.heldNow.Dec()
		c.holdSecs.Observe(time.Since(began).Seconds())
	}
}

// ControlID returns the proxy's id in the nodes' registries ("" without
// the control table).
func (s *Server) ControlID() string {
	if s.ctl == nil {
		return ""
	}
	return s.ctl.opts.ID
}
